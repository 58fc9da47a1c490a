"""What runs in a shaping worker process: its set-up (limits, priority, quiet output), the job
that shapes one body within a CPU-time limit, and the outcomes it sends back.

``_isolate`` runs these in ``trio-parallel`` workers forked from ``multiprocessing``'s fork
server, which imports this module before it forks (``_isolate.PRELOADED``). So this module
imports no Trio, no ``trio_parallel`` and nothing of the service: only the shaping code and
the standard library. What a worker imports, the fork server imports once as the service
starts, and the first page of every run waits for that (0.24 s of a 0.85 s one-page
``trio-batch run`` when this code lived beside the service's side, which imports Trio).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from dataclasses import dataclass
from typing import Final

from ..._errors import TargetError
from ..._model import Options
from ._shape import Body, shape_body

NICE: Final = 10
"""The workers' priority: on a busy machine the event loop gets the CPU first."""


@dataclass(frozen=True, slots=True)
class Shaped:
    content: str
    meta: dict[str, object]


@dataclass(frozen=True, slots=True)
class Failed:
    msg: str
    hint: str
    status: int


@dataclass(frozen=True, slots=True)
class Broke:
    what: str
    """``memory``, or the type name of an unexpected exception."""


_retire = False


def _lower(which: int, value: int) -> None:
    import resource

    _soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def worker_init(memory: int) -> None:
    """Run once in each new worker, before its first job: limits, priority, quiet output."""
    import resource

    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_AS, memory)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def worker_retire() -> bool:
    """Run after each job: a worker that ran out of memory is not trusted with another."""
    return _retire


def ready() -> bool:
    """The warm-up job: the worker has started and imported the shaping code."""
    return True


def job(body: Body, options: Options, cpu_seconds: float) -> Shaped | Failed | Broke:
    """Shape ``body`` in a worker, within ``cpu_seconds`` of CPU time from now."""
    global _retire
    import resource

    # SIGPROF (its default action ends the process, even inside jq's C loop) after exactly
    # cpu_seconds of CPU time; RLIMIT_CPU (whole seconds) is the kernel's backstop.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + cpu_seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    try:
        content, meta = shape_body(body, options)
    except TargetError as exc:
        return Failed(exc.msg, exc.hint, exc.status)
    except MemoryError:
        _retire = True
        return Broke("memory")
    except RecursionError:
        return Failed(
            "the response is nested too deeply to read",
            hint="fetch another format of this content (an HTML page instead of a PDF, say)",
            status=422,
        )
    except Exception as exc:
        return Broke(type(exc).__name__)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    return Shaped(content, meta)
