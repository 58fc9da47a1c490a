"""``trio_batch.web.shape``: the fetcher's shaping, for a body already in hand."""

from __future__ import annotations

from ..._model import Options, Result
from .._extract._options import validate_options
from .._extract._shape import Body, shape_body
from ._response import content_type as parse_content_type


def shape(body: bytes, *, url: str, content_type: str, options: Options) -> Result:
    """The result :class:`WebFetcher` would give for a response with this body, without fetching.

    It shapes the bytes the way the fetcher does (text, Markdown, PDF pages, ``jq``, ``grep``,
    ``question``), so pages that are already on disk or in a crawl can be converted the same
    way, and tests can check the extractor without a server. ``url`` is the page's address
    (relative links in Markdown are made absolute against it); ``content_type`` is the
    ``Content-Type`` header as sent, with its ``charset`` if any (``""`` sniffs the bytes).
    ``meta`` holds what the options add (``mode``, ``title``, ``page_count``, ``matches``, and
    with ``formats`` the other formats in ``formats``, ``links`` and ``metadata``), not the
    fields of a fetch (``status``, ``elapsed``...).

    It is synchronous and pure: CPU work in the caller's thread and process, **without** the
    limits that the fetcher puts around it (the fetcher runs this same code in worker processes
    with CPU time, wall time and memory limits, since ``jq``, ``grep``, the HTML parser and
    pypdf can take without bound on hostile input). Call it on bodies you trust, or run it in a
    process you can kill (``trio_parallel.run_sync(functools.partial(shape, ...))``).

    Raises:
        TargetError: invalid options (400), a type that cannot become text (415), an option
            that does not apply to this type or a jq/grep/PDF failure (422), pages outside the
            document (416): the errors a fetch of the same body would raise.
    """
    validate_options(options)
    media_type, charset = parse_content_type(content_type)
    content, meta = shape_body(Body(body, media_type, charset, url), options)
    return Result(content, meta)
