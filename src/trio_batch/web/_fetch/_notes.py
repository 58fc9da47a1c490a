"""What a fetch notes in its result's ``meta`` beside the page: the seconds it waited for its
hosts' slots (``waited``), and a hint when the page looks built by scripts (``hint``).

A fetch waits for a host slot when it starts outside the engine's own slot for that host: a
redirect to another host, ``POST /v1/fetch``, robots.txt of a host at its budget. The fetcher
counts those waits in the fetch's own :class:`HostWaits` (a context variable of the fetch's
task, :func:`counting_waits`); a busy target's waits between its tries are the engine's to add
(it counts the tries), into the same ``meta.waited``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from ..._model import Options
from .._extract._options import TEXT_FORMATS
from .._extract._shape import Body

TINY_TEXT: Final = 200
"""Characters of shaped text under which a page with scripts gets the ``render`` hint: a
single-page app's shell answers "Loading..." or "Enable JavaScript" (tens of characters),
a real page's text is thousands."""
_SCRIPT = re.compile(rb"<script\b", re.IGNORECASE)
_HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})


@dataclass(slots=True)
class HostWaits:
    """Seconds one fetch has waited for host slots so far."""

    seconds: float = 0.0


_WAITS: ContextVar[HostWaits | None] = ContextVar("trio_batch_host_waits", default=None)


@contextlib.contextmanager
def counting_waits() -> Iterator[HostWaits]:
    """Count the host waits of the fetch running in this block (this task's)."""
    waits = HostWaits()
    token = _WAITS.set(waits)
    try:
        yield waits
    finally:
        _WAITS.reset(token)


def count_wait(seconds: float) -> None:
    """Add ``seconds`` waited for a host slot to the fetch's count (if one is counting)."""
    waits = _WAITS.get()
    if waits is not None and seconds > 0:
        waits.seconds += seconds


def waited_meta(waits: HostWaits) -> dict[str, object]:
    """``{"waited": {"seconds": ...}}`` when the fetch waited for a host at all, else nothing."""
    seconds = round(waits.seconds, 3)
    return {"waited": {"seconds": seconds}} if seconds > 0 else {}


def _content_format(options: Options) -> str:
    """What the content is: the first text-like format, else the mode (``text`` by default);
    "" when ``formats`` asks for none (links or metadata alone: the content is empty)."""
    if options.formats:
        return next((name for name in options.formats if name in TEXT_FORMATS), "")
    return options.mode or "text"


def render_hint(body: Body, content: str, options: Options) -> dict[str, object]:
    """``{"hint": ...}`` when an HTML page's shaped text is tiny and the page has scripts: it is
    likely built in the browser, and ``render`` would show it. Nothing for a rendered page,
    one whose content an option narrows on purpose (``grep``, ``question``, ``jq``), ``raw``
    (the source as it is), or ``formats`` without a text-like one (no content asked for)."""
    narrowed = options.grep or options.question or options.jq
    if options.render or narrowed or _content_format(options) in ("raw", ""):
        return {}
    if body.content_type not in _HTML_TYPES:
        return {}
    text = content.strip()
    if len(text) >= TINY_TEXT or _SCRIPT.search(body.data) is None:
        return {}
    return {
        "hint": f"the page's text is {len(text)} characters and it runs scripts: it may build "
        "its content in the browser; try render: true (the page in a headless browser)"
    }
