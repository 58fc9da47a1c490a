"""The byte cap on every answer: long content is cut, and the answer says where and why.

A model reads a tool's answer into its context, so one page of 10 MB must not become one answer
of 10 MB. Every answer is JSON text of at most ``cap`` bytes (UTF-8). What is cut is the only
thing that can be long, a target's ``content``; the answer then carries ``content_cut`` with
the bytes shown, the bytes there were and what to ask for instead. A page of results holds as
many whole targets as fit, and its ``next_cursor`` starts at the first one left out, so paging
never skips a target.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from .._model import JSONValue

ANSWER_BYTES: Final = 48 * 1024
"""The default cap of one answer's text, in bytes: about twelve thousand tokens."""
MIN_ANSWER_BYTES: Final = 4 * 1024
"""The smallest cap allowed: room for a summary, an error and a cut result's note."""

CUT_HINT: Final = (
    "the content was cut to fit the answer; to read a narrower part, fetch the URL with "
    "options: grep (only matching lines), question (the passages that answer it), pages "
    "(PDF pages, like 1-3) or jq (a JSON response)"
)


def encode(answer: JSONValue) -> str:
    """An answer as the text a tool returns: JSON, non-ASCII kept as it is (fewer bytes)."""
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))


def size(answer: JSONValue) -> int:
    """The bytes of ``answer``'s text."""
    return len(encode(answer).encode("utf-8"))


def _cut_text(text: str, max_bytes: int) -> str:
    """The longest start of ``text`` of at most ``max_bytes`` UTF-8 bytes, whole characters."""
    return text.encode("utf-8")[: max(0, max_bytes)].decode("utf-8", "ignore")


def fit_result(item: Mapping[str, JSONValue], cap: int) -> dict[str, JSONValue]:
    """``item`` (a target or a fetch answer with a ``result``) cut to at most ``cap`` bytes.

    Only ``result.content`` is cut; an item that fits is returned unchanged (as a new dict).
    """
    fitted = dict(item)
    if size(fitted) <= cap:
        return fitted
    result = item.get("result")
    if not isinstance(result, Mapping) or not isinstance(result.get("content"), str):
        return fitted  # nothing that can be cut: the caller decides (a page drops the item)
    content = str(result["content"])
    total = len(content.encode("utf-8"))
    shown = total
    # JSON escapes make the text longer than the content's bytes: cut, measure, cut again.
    for _ in range(8):
        over = size(_with_content(fitted, result, _cut_text(content, shown), shown, total)) - cap
        if over <= 0:
            break
        shown = max(0, shown - over - 16)
    cut = _cut_text(content, shown)
    return _with_content(fitted, result, cut, len(cut.encode("utf-8")), total)


def _with_content(
    item: dict[str, JSONValue],
    result: Mapping[str, JSONValue],
    content: str,
    shown: int,
    total: int,
) -> dict[str, JSONValue]:
    return {
        **item,
        "result": {**result, "content": content},
        "content_cut": {"shown_bytes": shown, "total_bytes": total, "hint": CUT_HINT},
    }


def fit_page(
    head: Mapping[str, JSONValue], items: Sequence[Mapping[str, JSONValue]], cap: int
) -> tuple[dict[str, JSONValue], int]:
    """``head`` with ``results``: as many of ``items`` as fit in ``cap`` bytes, and how many.

    Items are kept whole while they fit; the first item is cut (its content) rather than
    dropped, so a page always makes progress. The caller points ``next_cursor`` past the kept
    ones.
    """
    page: dict[str, JSONValue] = {**head, "results": []}
    kept: list[JSONValue] = []
    # Room for the cursor and the note the caller adds after the page is chosen.
    budget = cap - size(page) - 512
    used = 0
    for i, item in enumerate(items):
        room = budget - used - 1  # the comma between items
        fitted = dict(item) if size(item) <= room else None
        if fitted is None and i == 0:
            fitted = fit_result(item, max(0, room))
        if fitted is None or size(fitted) > room:
            break
        kept.append(fitted)
        used += size(fitted) + 1
    page["results"] = kept
    return page, len(kept)
