"""Where shaping workers come from: ``multiprocessing``'s fork server, and what it imports
before it forks one (``_worker``, the shaping code without Trio).

This module imports only the standard library, so a program can start the server as its
first step (:func:`start_shaping`), and the server's Python start and imports (about 0.1 s)
run on another core beside the program's own, instead of in front of its first shaped page.
``trio-batch run`` and ``crawl`` do that; a fetcher opened later uses the running server.
"""

from __future__ import annotations

import multiprocessing
from typing import Final

PRELOADED: Final = ("trio_batch.web._extract._worker", "_trio_parallel_workers")
"""What the fork server imports before it forks a worker: the worker's side, so the shaping
code, and nothing of the service's (``_worker`` says why); and trio-parallel's worker loop
(its own light package, which a forked worker imported afresh: 0.03 s each). A name that
does not import (no ``web`` extra) is skipped by the server."""


def preload_shaping() -> None:
    """Have ``multiprocessing``'s fork server import the shaping code when it starts.

    The fork server is one per process (``multiprocessing``'s); its preload list is replaced by
    :data:`PRELOADED`, which takes effect if the server has not started yet (the first worker
    of the first shaper starts it). A server started earlier by other code forks workers that
    import the shaping code themselves: slower to start, the same otherwise.
    """
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOADED))


def start_shaping() -> None:
    """Start the process that shaping workers are forked from, now, in the background.

    Without it the first fetch that may need a worker starts the server, and the first page
    to shape waits for it. Call it before the program's own imports, so the two overlap; it
    returns once the server is launched (a fork and exec), not imported. The server ends with
    this process. Calling it again, or after a fetcher started the server, does nothing.
    """
    from multiprocessing import forkserver

    preload_shaping()
    forkserver.ensure_running()
