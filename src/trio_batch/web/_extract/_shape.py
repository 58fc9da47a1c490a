"""Turning a response body into the content an agent asked for (SPEC §6 options).

Pure functions over bytes. :func:`shape_body` runs user code (jq, grep) and parsers with
superlinear worst cases (HTML5 tree building, pypdf) on untrusted input, so the fetcher runs it in a
worker process with CPU and memory limits (``_isolate``); only work that is cheap and bounded
whatever the input runs in a thread of the service. Every failure is a ``TargetError`` that
says what was wrong and what to ask for instead.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeAlias

import jq  # type: ignore[import-not-found,unused-ignore]  # ships no type information
import regex

from ..._errors import TargetError
from ..._model import Options
from ._html import html_to_text, parse, shaped
from ._html_clean import clean_html
from ._html_meta import MAX_LINKS, base_url, page_links, page_metadata
from ._options import (
    GREP_HINT,
    JQ_HINT,
    TEXT_FORMATS,
    check_grep,
    check_jq,
    lone_surrogate,
    parse_pages,
)
from ._pdf import document_info, document_title, page_text, uri_links
from ._question import answer

if TYPE_CHECKING:
    from pypdf import PdfReader

Kind: TypeAlias = Literal["html", "json", "pdf", "text"]

GREP_CONTEXT_LINES: Final = 2
GREP_SECONDS: Final = 2.0
JQ_MAX_OUTPUTS: Final = 10_000


def _bad(msg: str, hint: str) -> TargetError:
    return TargetError(msg, hint=hint, status=400)


def _not_applicable(msg: str, hint: str) -> TargetError:
    return TargetError(msg, hint=hint, status=422)


class JqProgram(Protocol):
    """A compiled jq program, as far as it is used here (the jq package ships no types)."""

    def input_text(self, text: str) -> Iterable[object]:
        """The program's outputs for the JSON document ``text``.

        Raises:
            ValueError: ``text`` is not JSON, or the program fails on it.
        """
        ...


def compile_jq(program: str) -> JqProgram:
    """The compiled jq program (user code: this runs in a shaping worker only).

    Raises:
        TargetError: the program uses a refused builtin, or does not compile (status 400).
    """
    check_jq(program)
    try:
        compiled: JqProgram = jq.compile(program)
    except ValueError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        raise _bad(f"the jq program does not compile: {detail}", JQ_HINT) from None
    return compiled


def compile_grep(pattern: str) -> regex.Pattern[str]:
    """The compiled ``grep`` pattern, Python ``re`` syntax (user code: this runs in a shaping
    worker only, after :func:`check_grep` bounded its repeats).

    Raises:
        TargetError: not a valid regular expression (status 400).
    """
    check_grep(pattern)
    try:
        return regex.compile(pattern, flags=regex.VERSION0)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        detail = str(exc) if isinstance(exc, regex.error) else type(exc).__name__
        raise _bad(f"grep is not a valid regular expression: {detail}", GREP_HINT) from None


# -- content types ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Body:
    """A downloaded response body and what the server said it is."""

    data: bytes
    content_type: str
    """The media type, lower case, without parameters ("" when the server sent none)."""
    charset: str | None
    url: str
    """The final URL (for resolving relative links in Markdown)."""


_TEXT_TYPES: Final = frozenset(
    {
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-sh",
        "application/sql",
        "application/rss+xml",
        "application/atom+xml",
    }
)
_SNIFF_TYPES: Final = frozenset(
    {"", "application/octet-stream", "binary/octet-stream", "application/x-download"}
)


def kind_of(body: Body) -> Kind:
    """What the body is, from its media type (sniffing the bytes only for untyped bodies).

    Raises:
        TargetError: a type that cannot become text (images, archives, media) (status 415).
    """
    ctype = body.content_type
    if ctype in ("text/html", "application/xhtml+xml"):
        return "html"
    if ctype in ("application/json", "text/json") or ctype.endswith("+json"):
        return "json"
    if ctype in ("application/pdf", "application/x-pdf"):
        return "pdf"
    if ctype.startswith("text/") or ctype in _TEXT_TYPES or ctype.endswith("+xml"):
        return "text"
    if ctype in _SNIFF_TYPES:
        head = body.data[:1024]
        if head.startswith(b"%PDF-"):
            return "pdf"
        lowered = head.lstrip().lower()
        if lowered.startswith((b"<!doctype html", b"<html")):
            return "html"
        if b"\x00" not in head:
            try:
                body.data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                return "json" if lowered.startswith((b"{", b"[")) else "text"
    raise TargetError(
        f"the response is {ctype or 'binary data'}, which cannot be turned into text",
        hint="trio-batch reads HTML, text, JSON and PDF; fetch a page that describes this file",
        status=415,
    )


_NOT_CHARSETS: Final = frozenset(
    {"punycode", "idna", "unicode-escape", "raw-unicode-escape", "undefined"}
)
"""Python codecs a page may name but that are no web charset; punycode decodes in quadratic
time in pure Python (40 KB: 0.3 s), so a hostile page could stall a thread with it."""

_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([\w.:-]+)""", re.I)


def decode(body: Body, kind: Kind) -> str:
    """The body as text: BOM, then the declared charset, then ``<meta charset>``, then UTF-8."""
    data = body.data
    for bom, encoding in (
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ):
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    candidates = [body.charset or ""]
    if kind == "html":
        found = _META_CHARSET.search(data[:4096])
        if found:
            candidates.append(found.group(1).decode("ascii", errors="replace"))
    for name in candidates:
        if not name:
            continue
        try:
            if codecs.lookup(name).name in _NOT_CHARSETS:
                continue
            return data.decode(name, errors="replace")
        except LookupError:  # unknown, or a transform such as zlib that bytes.decode refuses
            continue
    return data.decode("utf-8", errors="replace")


# -- the options --------------------------------------------------------------------------------


def _pdf_pages(body: Body, spec: str, wanted: _Wanted) -> tuple[dict[str, str], dict[str, object]]:
    """The PDF's pages in each text-like format of ``wanted`` (``[page N]`` headers in text,
    ``## Page N`` in Markdown), and its ``meta``: ``page_count``, ``pages``, ``title``, and
    ``links``/``metadata`` when asked for."""
    import pypdf
    from pypdf.errors import PyPdfError

    hint = "the file may be damaged or not a PDF; fetch the page that links to it instead"
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = pypdf.PdfReader(io.BytesIO(body.data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise TargetError(
                "the PDF is encrypted with a password",
                hint="look for an unprotected copy of the document",
                status=422,
            )
        count = len(reader.pages)
        numbers = _page_numbers(spec, count)
        title = document_title(reader)
        texts: list[tuple[int, str]] = []
        for number in numbers:
            text = page_text(reader.pages[number - 1])
            if not title and number == 1:
                title = next((line.strip() for line in text.splitlines() if line.strip()), "")
            texts.append((number, text))
        meta: dict[str, object] = {"page_count": count, "pages": numbers}
        if title:
            meta["title"] = title[:300]
        meta.update(_pdf_extras(reader, body.url, numbers, wanted))
    except TargetError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise TargetError(
            f"the PDF could not be read ({type(exc).__name__})", hint=hint, status=422
        ) from None
    shaped = {}
    for name in wanted.texts:
        sections = [
            (f"## Page {n}" if name == "markdown" else f"[page {n}]") + f"\n\n{text.strip()}"
            for n, text in texts
        ]
        shaped[name] = "\n\n".join(section.rstrip() for section in sections) + "\n"
    return shaped, meta


def _html_formats(
    html: str, url: str, formats: Sequence[str], main: bool
) -> tuple[dict[str, str], dict[str, object]]:
    """Every format of ``formats`` from one parse of ``html`` (the page at ``url``, its final
    URL), and its ``meta`` (``title``, ``links``, ``metadata``): text and Markdown by the
    writer's walks, ``html`` cleaned from the same tree (last, as it edits the tree), links
    and metadata read from it (the whole page's); with ``main``, text, Markdown and ``html``
    are the main content's. Never raises on malformed HTML."""
    document = parse(html)
    if main and any(name in ("text", "markdown", "html") for name in formats):
        document.keep_main()
    texts: dict[str, str] = {}
    title: str | None = None
    for name in formats:
        if name in ("text", "markdown"):
            texts[name], title = shaped(document, url, name == "markdown")
        elif name == "raw":
            texts[name] = html
    if title is None:
        title = document.title()
    meta: dict[str, object] = {"title": title} if title else {}
    if "links" in formats:
        meta["links"] = page_links(document.trees, url)
    if "metadata" in formats:
        meta["metadata"] = page_metadata(document.trees, url, title)
    if "html" in formats:
        document.hide_chrome()
        texts["html"] = clean_html(document.trees[-1], base_url(document.trees[0], url))
    return texts, meta


def _page_numbers(spec: str, count: int) -> list[int]:
    """The pages ``spec`` names (all without one), in its order, each once.

    Raises:
        TargetError: none of them is in the document (status 416).
    """
    wanted: list[int] = []
    seen: set[int] = set()
    for start, end in parse_pages(spec) if spec else [(1, None)]:
        last = count if end is None else min(end, count)
        for n in range(start, last + 1):
            if n not in seen:
                seen.add(n)
                wanted.append(n)
    if not wanted:
        raise TargetError(
            f"the PDF has {count} page{'s' if count != 1 else ''}; pages={spec} asks for "
            "none of them",
            hint=f"ask for pages between 1 and {count}, such as pages=1-{min(count, 5)}",
            status=416,
        )
    return wanted


def _pdf_extras(
    reader: PdfReader, url: str, numbers: list[int], wanted: _Wanted
) -> dict[str, object]:
    """``metadata`` (the document info) and ``links`` (the URI annotations of the pages read;
    a damaged annotation ends the list there) when ``wanted`` asks for them."""
    extras: dict[str, object] = {}
    if wanted.metadata:
        extras["metadata"] = document_info(reader, len(reader.pages))
    if wanted.links:
        host = (urllib.parse.urlsplit(url).hostname or "").lower()
        try:
            extras["links"] = uri_links(reader, numbers, host, MAX_LINKS)
        except Exception:  # damaged annotations only cost the links
            extras["links"] = []
    return extras


def _jq(text: str, program: str) -> tuple[str, dict[str, object]]:
    compiled = compile_jq(program)
    lines: list[str] = []
    try:
        for value in compiled.input_text(text):
            if len(lines) >= JQ_MAX_OUTPUTS:
                raise TargetError(
                    f"the jq program gave more than {JQ_MAX_OUTPUTS:,} results",
                    hint="narrow it, for example with limit(100; ...) or first(...)",
                    status=422,
                )
            lines.append(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except ValueError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "error"
        if detail.startswith("parse error"):
            raise TargetError(
                f"the response is not valid JSON: {detail}",
                hint="drop jq to read the response as text",
                status=422,
            ) from None
        raise TargetError(
            f"the jq program failed on this document: {detail}",
            hint="check the paths against the document (fetch it without jq to see it); "
            "use ? to skip missing keys, such as .items[]?.name",
            status=422,
        ) from None
    return "\n".join(lines) + ("\n" if lines else ""), {"jq_results": len(lines)}


def _grep(text: str, pattern: str, context: bool, seconds: float) -> tuple[str, dict[str, object]]:
    compiled = compile_grep(pattern)
    lines = text.splitlines()
    clock = time.monotonic
    deadline = clock() + seconds
    matched: list[int] = []
    try:
        for number, line in enumerate(lines):
            if compiled.search(line, timeout=max(deadline - clock(), 0.001)):
                matched.append(number)
    except TimeoutError:
        raise TargetError(
            f"grep took longer than {seconds:g} s on this page",
            hint="simplify the pattern: avoid nested repetition such as (a+)+ or (.*)*",
            status=422,
        ) from None
    around = GREP_CONTEXT_LINES if context else 0
    keep: list[int] = sorted(
        {n for m in matched for n in range(max(m - around, 0), min(m + around + 1, len(lines)))}
    )
    out: list[str] = []
    for i, number in enumerate(keep):
        if around and i and number != keep[i - 1] + 1:
            out.append("--")
        out.append(lines[number])
    return "\n".join(out) + ("\n" if out else ""), {"matches": len(matched)}


@dataclass(frozen=True, slots=True)
class _Wanted:
    """What the options ask of a body: its text-like formats (the first is the content; with
    no ``formats``, the mode alone), and whether links and metadata."""

    texts: tuple[str, ...]
    links: bool = False
    metadata: bool = False
    listed: bool = False
    """Asked with ``formats`` (else with ``mode``, as before ``formats`` existed)."""

    @classmethod
    def of(cls, options: Options) -> _Wanted:
        formats = options.formats
        if not formats:
            return cls((options.mode or "text",))
        texts = tuple(name for name in formats if name in TEXT_FORMATS)
        return cls(texts, "links" in formats, "metadata" in formats, listed=True)


def _check_fits(name: str, kind: Kind, described: str, listed: bool) -> None:
    """Refuse a text-like format that does not apply to this kind of body (status 422)."""
    label = f"the {name} format" if listed else f"mode={name}"
    if name == "html" and kind != "html":
        raise _not_applicable(
            f"{label} applies to HTML pages; this response is {described}",
            "use text (the default)" if not listed else "ask for text or raw instead",
        )
    if name == "markdown" and kind == "json":
        raise _not_applicable(
            f"{label} does not apply to {described}",
            "use mode=raw or jq= for JSON" if not listed else "ask for text or raw instead",
        )
    if name == "raw" and kind == "pdf":
        raise _not_applicable(
            f"{label} does not apply to a PDF, which is binary",
            "use mode=text (the default), with pages= to pick pages"
            if not listed
            else "ask for text or markdown instead, with pages= to pick pages",
        )


def _check_options(body: Body, kind: Kind, options: Options, wanted: _Wanted) -> None:
    what = {"html": "an HTML page", "json": "JSON", "pdf": "a PDF", "text": "plain text"}[kind]
    described = f"{what} ({body.content_type})" if body.content_type else what
    if options.jq and kind != "json":
        raise _not_applicable(
            f"jq applies to JSON responses; this response is {described}",
            "drop jq, or fetch the site's JSON URL",
        )
    if options.pages and kind != "pdf":
        raise _not_applicable(
            f"pages applies to PDF documents; this response is {described}",
            "drop pages; use question= or grep= to narrow other pages",
        )
    for name in wanted.texts:
        _check_fits(name, kind, described, wanted.listed)


def _shaped(
    body: Body, kind: Kind, options: Options, wanted: _Wanted
) -> tuple[dict[str, str], dict[str, object]]:
    """Each text-like format ``wanted`` asks for, and what shaping adds to ``meta`` (``title``,
    a PDF's pages, ``links`` and ``metadata``)."""
    if kind == "pdf":
        return _pdf_pages(body, options.pages, wanted)
    text = decode(body, kind)
    meta: dict[str, object] = {}
    if kind == "html" and wanted.listed:
        return _html_formats(text, body.url, options.formats, options.main_content)
    mode = wanted.texts[0] if wanted.texts else ""  # formats of links or metadata alone
    if kind == "html" and mode in ("text", "markdown"):
        content, title = html_to_text(
            text,
            base_url=body.url,
            markdown=mode == "markdown",
            main_content=options.main_content,
        )
        if title:
            meta["title"] = title
        return {mode: content}, meta
    if kind == "json" and options.jq:
        content, extra = _jq(text, options.jq)
        return {mode: content}, {**meta, **extra}
    if wanted.links:
        meta["links"] = []
    if wanted.metadata:
        meta["metadata"] = {}
    return dict.fromkeys(wanted.texts, text), meta


def shape_body(
    body: Body, options: Options, *, grep_seconds: float = GREP_SECONDS
) -> tuple[str, dict[str, object]]:
    """The content the options ask for, and what they add to ``meta``.

    Order: the mode or formats (or the PDF's pages, or jq on JSON), then ``question`` or
    ``grep`` on the content. With ``formats``, the first text-like format is the content (""
    when there is none), each other one goes in ``meta["formats"]``, and ``links`` and
    ``metadata`` in ``meta`` under their names (empty for JSON and plain text).

    Raises:
        TargetError: the type cannot become text (415), an option does not apply to this type
            (422), a page range outside the document (416), or jq/grep/PDF failures (422).
    """
    kind = kind_of(body)
    wanted = _Wanted.of(options)
    _check_options(body, kind, options, wanted)
    texts, extra = _shaped(body, kind, options, wanted)
    first = wanted.texts[0] if wanted.texts else ""
    meta: dict[str, object] = {"mode": first} if first else {}
    meta.update(extra)
    content = _valid_text(texts.get(first, ""))
    if len(wanted.texts) > 1:
        meta["formats"] = {name: _valid_text(texts[name]) for name in wanted.texts[1:]}
    if options.question:
        context = True if options.context is None else options.context
        content, extra = answer(content, options.question, context)
        meta.update(extra)
    elif options.grep:
        content, extra = _grep(content, options.grep, bool(options.context), grep_seconds)
        meta.update(extra)
    return content, meta


def _valid_text(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate (from a PDF's broken UTF-16 text strings,
    say) becomes U+FFFD."""
    if lone_surrogate(text) is not None:
        return text.encode("utf-8", errors="replace").decode("utf-8")
    return text
