"""PDF text with pypdf: pages in reading order, and the document's title.

pypdf gives text in content-stream order. That is the reading order for most producers, but
Chromium paints positioned boxes (the code examples of most documentation themes) after the
text around them, so an example came out paragraphs after the sentence that introduces it.
:func:`page_text` keeps pypdf's lines as they are and only puts them in order from the top of
the page down; pages that look like two columns keep the stream order, which is right there.

The text is NFKC-normalised: Chromium (and TeX) print "file" with the ligature glyph U+FB01
(``ﬁ``), which pypdf hands back as one character, so ``grep "file"`` and a question about files
found nothing in text that visibly said so.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pypdf import PageObject, PdfReader

SAME_LINE: Final = 2.0
"""Points within which two lines count as one row of the page (table cells, say)."""
_SPACE = re.compile(r"\s+")


def page_text(page: PageObject) -> str:
    """The page's text, its lines ordered top to bottom (left to right within a row), NFKC."""
    return unicodedata.normalize("NFKC", _ordered_text(page))


def _ordered_text(page: PageObject) -> str:
    chunks: list[tuple[str, float, float]] = []

    def visit(text: str, cm: list[float], tm: list[float], *_: object) -> None:
        x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        chunks.append((text, x, y))

    text = page.extract_text(visitor_text=visit) or ""
    lines: list[tuple[float, float, int, str]] = []  # y, x, position in the stream, text
    parts: list[str] = []
    where: tuple[float, float] | None = None
    for chunk, x, y in [*chunks, ("\n", 0.0, 0.0)]:
        pieces = chunk.split("\n")
        for i, piece in enumerate(pieces):
            if i:  # a line ends here
                joined = "".join(parts)
                if joined.strip() and where is not None:
                    lines.append((where[1], where[0], len(lines), joined))
                parts, where = [], None
            if piece:
                parts.append(piece)
                if where is None and piece.strip():
                    where = (x, y)
    if not lines or _two_columns(lines, float(page.mediabox.width)):
        return text
    lines.sort(key=lambda line: (-line[0], line[2]))
    rows: list[list[tuple[float, float, int, str]]] = []
    for line in lines:
        if rows and rows[-1][0][0] - line[0] <= SAME_LINE:
            rows[-1].append(line)
        else:
            rows.append([line])
    return "\n".join(
        "\n".join(line[3] for line in sorted(row, key=lambda line: (line[1], line[2])))
        for row in rows
    )


def _two_columns(lines: list[tuple[float, float, int, str]], width: float) -> bool:
    """Whether the page looks like two columns: many lines start right of its middle."""
    right = sum(1 for line in lines if line[1] > width * 0.5)
    return right >= 5 and 0.25 * len(lines) <= right


def document_title(reader: PdfReader) -> str:
    """The title in the document's metadata, or ""."""
    try:
        metadata = reader.metadata
        title = metadata.title if metadata is not None else None
    except Exception:  # a damaged info dictionary only costs the title
        return ""
    return _SPACE.sub(" ", title).strip() if isinstance(title, str) else ""


_INFO: Final = {
    "title": "/Title",
    "author": "/Author",
    "subject": "/Subject",
    "keywords": "/Keywords",
    "creator": "/Creator",
    "producer": "/Producer",
    "created": "/CreationDate",
    "modified": "/ModDate",
}
"""``metadata`` keys, and the document info entries they come from."""
_PDF_DATE = re.compile(r"^D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?")
MAX_INFO_CHARS: Final = 2_000


def document_info(reader: PdfReader, pages: int) -> dict[str, object]:
    """The ``metadata`` of a PDF: its document info (``title``, ``author``, ``subject``,
    ``keywords``, ``creator``, ``producer``, ``created`` and ``modified`` as ISO 8601 when
    they parse) and ``page_count``. A damaged info dictionary gives only the page count."""
    info: dict[str, object] = {}
    try:
        metadata = reader.metadata
        for key, entry in _INFO.items():
            value = metadata.get(entry) if metadata is not None else None
            if isinstance(value, str):
                text = _SPACE.sub(" ", value[: MAX_INFO_CHARS * 4]).strip()[:MAX_INFO_CHARS]
                if text:
                    info[key] = _iso_date(text) if key in ("created", "modified") else text
    except Exception:  # a damaged info dictionary only costs its fields
        info.clear()
    info["page_count"] = pages
    return info


def _iso_date(value: str) -> str:
    """A PDF date (``D:20240102030405+01'00'``) as ISO 8601 (``2024-01-02T03:04:05``, local
    time as written), or the value as it is."""
    found = _PDF_DATE.match(value)
    if found is None:
        return value
    year, month, day, hour, minute, second = (
        part or default
        for part, default in zip(found.groups(), ("", "01", "01", "00", "00", "00"), strict=True)
    )
    return f"{year}-{month}-{day}T{hour}:{minute}:{second}"


def _uri(annotation: object) -> str | None:
    """The URI a link annotation's action opens, if it is one."""
    action = annotation.get("/A") if isinstance(annotation, dict) else None
    action = action.get_object() if action is not None else None
    uri = action.get("/URI") if isinstance(action, dict) else None
    return uri if isinstance(uri, str) else None


def uri_links(
    reader: PdfReader, numbers: list[int], host: str, most: int
) -> list[dict[str, object]]:
    """The URI link annotations of the pages ``numbers`` (1-based), each URL once (without its
    fragment), http(s) only, at most ``most``: ``{"url", "text": "", "internal"}`` (a PDF link
    has no anchor text)."""
    import urllib.parse

    found: dict[str, dict[str, object]] = {}
    for number in numbers:
        annotations = reader.pages[number - 1].get("/Annots")
        for ref in annotations.get_object() if annotations is not None else ():
            uri = _uri(ref.get_object())
            if uri is None or len(uri) > 2048:
                continue
            url = urllib.parse.urldefrag(uri.strip()).url
            if not url.startswith(("http://", "https://")) or url in found:
                continue
            try:
                internal = (urllib.parse.urlsplit(url).hostname or "").lower() == host
            except ValueError:
                continue
            found[url] = {"url": url, "text": "", "internal": internal}
            if len(found) >= most:
                return list(found.values())
    return list(found.values())
