"""A site's URLs from its sitemaps and its start page's links: ``POST /v1/map``, ``trio-batch map``.

:func:`site_map` reads, in this order: the start page (its ``<a href>`` links, absolute and
without fragments), the site's robots.txt (its ``Sitemap:`` lines), then those sitemaps, or
``/sitemap.xml`` when robots.txt names none: sitemap index files (nested at most
:attr:`MapBounds.depth` deep, each document read once, so an index that lists itself ends),
gzip (``.xml.gz`` or a ``Content-Encoding``) and plain-text sitemaps (a URL a line). The answer
lists the start page, the sitemaps' URLs, then the page's links, deduplicated, on the start
page's host unless asked otherwise, at most ``limit`` of them.

Which sitemaps are read (the sitemaps protocol, "Sitemaps & Cross Submits"): a sitemap that
robots.txt names is read wherever it is (a site may keep its sitemaps on another host), and
keeps only the URLs of the start page's host; an index's sitemaps on the index's own host or
the start page's. A sitemap that is not read (an index naming another host's, an address the
guard refuses, one robots.txt disallows) is a note, and the map is not ``complete``.

With ``robots`` on (the map's, else the fetcher's default), each document is checked against
its host's robots.txt before it is requested, redirect hops too, as a fetch is.

Every request is one of the fetcher's own: a slot of its fair pool for the caller, its guard
(each hop's address checked and pinned) and its host budget, through
``WebFetcher._download`` as robots.txt's requests go. Everything is bounded
(:class:`MapBounds`): the URLs, the bytes read of each document (after decompression, counted
as they are inflated, so a gzip bomb costs at most the cap), the bytes in all, the documents
fetched, the depth of indexes and the time in all. A bound that is reached ends the map early
with the URLs found so far; the answer's ``complete`` is then false and its ``notes`` say
which bound (in words without a URL: an answer may quote it, a log never does).

XML is read incrementally with expat, a piece at a time as it is inflated. A sitemap that
declares a DTD (so entities, and with them the billion laughs and external entities) is
refused at its ``<!DOCTYPE``, before expat reads a declaration; an element nested deeper than
any sitemap needs is refused too. What was read before such a refusal, or before malformed
XML, is kept.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeVar, final
from urllib.parse import urldefrag, urljoin, urlsplit
from xml.parsers import expat

import httpx
import trio

from ..._errors import RetryLater, TargetError
from ..._model import Caller, Options
from .._guard._check import Checked, check_url
from .._guard._errors import BUSY_STATUSES, busy_error, status_error, timeout_error
from ._response import Refused, content_type
from ._robots import MAX_ROBOTS_BYTES, origin_of

if TYPE_CHECKING:
    from ._fetcher import WebFetcher

logger = logging.getLogger("trio_batch.web")

T = TypeVar("T")

DEFAULT_LIMIT: Final = 1_000
"""URLs a map answers when the caller does not say."""
MAX_LIMIT: Final = 10_000
"""The most URLs one map answers."""

_PIECE: Final = 64 * 1024
"""Most bytes inflated (and parsed) at once: a gzip bomb's chunk is read a piece at a time."""
_MAX_NESTING: Final = 16
"""Deepest element of a sitemap: ``urlset/url/loc`` is 3; extensions add a level or two."""
_TEXT_MIME: Final = frozenset({"text/html", "application/xhtml+xml"})


@final
@dataclass(frozen=True, slots=True)
class MapBounds:
    """What one map may cost; reaching a bound ends it early with what was found.

    Raises:
        ValueError: a bound that is not > 0, naming it.
    """

    document_bytes: int = 8 * 2**20
    """Bytes read of one sitemap, after decompression (the sitemaps protocol allows 50 MB;
    8 MiB holds some 50,000 URLs, more than :data:`MAX_LIMIT`)."""
    page_bytes: int = 2 * 2**20
    """Bytes read of the start page for its links."""
    total_bytes: int = 32 * 2**20
    """Bytes read over every document of the map, after decompression."""
    documents: int = 32
    """Requests made for one map (the start page, robots.txt and the sitemaps)."""
    depth: int = 3
    """Levels of sitemap index files followed: an index listing an index listing sitemaps is 2."""
    seconds: float = 30.0
    """Time for the whole map, on Trio's clock."""

    def __post_init__(self) -> None:
        for name in ("document_bytes", "page_bytes", "total_bytes", "documents", "depth"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"MapBounds.{name} must be > 0 (got {value!r})")
        if not self.seconds > 0:
            raise ValueError(f"MapBounds.seconds must be > 0 (got {self.seconds!r})")


@final
@dataclass(frozen=True, slots=True)
class SiteMap:
    """The answer of a map: the URLs, whether every source was read whole, and why not."""

    urls: tuple[str, ...]
    complete: bool
    """False when a bound ended the map early, or a source could not be read."""
    notes: tuple[str, ...] = ()
    """What was cut or skipped, in words for people (never a URL)."""

    def to_json(self) -> dict[str, object]:
        """``{"urls", "complete", "notes"}``, as ``POST /v1/map`` answers it."""
        return {"urls": list(self.urls), "complete": self.complete, "notes": list(self.notes)}


def check_limit(limit: object) -> int:
    """``limit`` if it is a whole number from 1 to :data:`MAX_LIMIT`, else ``ValueError``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(
            f"limit must be a whole number from 1 to {MAX_LIMIT:,} (got {limit!r}); "
            f"leave it out for {DEFAULT_LIMIT:,}"
        )
    return limit


# -- bounded decoding ---------------------------------------------------------------------------


class _Unsupported(Exception):
    """A ``Content-Encoding`` that is not undone here (we ask for gzip and deflate only)."""


class _Inflater:
    """Undoes gzip, zlib or raw deflate a :data:`_PIECE` at a time (``max_length``), so the
    output of one input chunk is never held whole."""

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._z = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            try:
                out = self._z.decompress(data, _PIECE)
            except zlib.error:
                if self._started or self._wbits != zlib.MAX_WBITS:
                    raise
                # "deflate" is raw deflate on some servers (as httpx tolerates too).
                self._wbits = -zlib.MAX_WBITS
                self._z = zlib.decompressobj(self._wbits)
                continue
            self._started = True
            data = self._z.unconsumed_tail
            if self._z.eof and self._z.unused_data:  # a gzip of several members
                data = self._z.unused_data
                self._z = zlib.decompressobj(self._wbits)
            if out:
                yield out
            elif not data:
                return


class _Decoded:
    """A body's bytes as the parser reads them: the ``Content-Encoding`` undone, then a gzip
    body (a ``.xml.gz``, sniffed by its magic bytes) undone."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        if encoding in ("gzip", "x-gzip"):
            self._outer: _Inflater | None = _Inflater(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":
            self._outer = _Inflater(zlib.MAX_WBITS)
        elif encoding in ("", "identity"):
            self._outer = None
        else:
            raise _Unsupported(encoding)
        self._inner: _Inflater | None = None
        self._head = b""
        self._sniffed = False

    def feed(self, raw: bytes) -> Iterator[bytes]:
        pieces = self._outer.feed(raw) if self._outer is not None else iter((raw,))
        for piece in pieces:
            yield from self._body(piece)

    def _body(self, piece: bytes) -> Iterator[bytes]:
        if not self._sniffed:
            self._head += piece
            if len(self._head) < 2:
                return
            self._sniffed = True
            piece, self._head = self._head, b""
            if piece.startswith(b"\x1f\x8b"):
                self._inner = _Inflater(zlib.MAX_WBITS | 16)
        if self._inner is None:
            for start in range(0, len(piece), _PIECE):
                yield piece[start : start + _PIECE]
        else:
            yield from self._inner.feed(piece)

    def end(self) -> bytes:
        """What is left of a body shorter than the two bytes sniffed."""
        return b"" if self._sniffed else self._head


# -- reading sitemaps ---------------------------------------------------------------------------


class _Hostile(Exception):
    """A sitemap refused while it was parsed; the message is the answer's note."""


class _SitemapReader:
    """One sitemap, fed a piece at a time: XML (``urlset`` or ``sitemapindex``) or plain text.

    After each piece, :attr:`pages` and :attr:`sitemaps` hold the ``<loc>`` values read since
    they were last emptied.
    """

    def __init__(self) -> None:
        self.pages: list[str] = []
        self.sitemaps: list[str] = []
        self.kind = ""
        self._mode = ""  # "xml" or "text", from the first byte that is not blank
        self._path: list[str] = []
        self._loc: list[str] | None = None
        self._loc_chars = 0
        self._line = bytearray()
        parser = expat.ParserCreate()
        parser.buffer_text = True
        parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.StartDoctypeDeclHandler = self._doctype
        parser.EntityDeclHandler = self._entity
        parser.ExternalEntityRefHandler = self._external
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._text
        self._parser = parser

    def feed(self, piece: bytes) -> None:
        """Read one more piece.

        Raises:
            _Hostile: a DTD, an entity declaration, or nesting past any sitemap's.
            expat.ExpatError: the XML is malformed here.
        """
        if not self._mode:
            blank = piece.lstrip(b" \t\r\n\xef\xbb\xbf")
            if not blank:
                return
            self._mode = "xml" if blank.startswith(b"<") else "text"
            if self._mode == "text":
                self.kind = "text"
        if self._mode == "xml":
            self._parser.Parse(piece, False)
        else:
            self._text_lines(piece)

    def close(self) -> None:
        """The end of the body: a last line of text, or the end of the XML document."""
        if self._mode == "text":
            self._text_lines(b"\n")
        elif self._mode == "xml":
            self._parser.Parse(b"", True)

    def _text_lines(self, piece: bytes) -> None:
        for line in piece.splitlines(keepends=True):
            if len(self._line) <= _URL_CHARS:
                self._line += line[: _URL_CHARS + 1]
            if line.endswith((b"\n", b"\r")):
                text = self._line.decode("utf-8", "replace").strip()
                self._line.clear()
                if text.startswith(("http://", "https://")):
                    self.pages.append(text)

    def _doctype(self, *args: object) -> None:
        raise _Hostile("a sitemap declares a DTD, which trio-batch refuses (entities): not read")

    def _entity(self, *args: object) -> None:
        raise _Hostile("a sitemap declares an entity, which trio-batch refuses: not read")

    def _external(self, *args: object) -> int:
        raise _Hostile("a sitemap refers to an external entity, which trio-batch refuses")

    def _start(self, name: str, attributes: object) -> None:
        local = name.rpartition(":")[2]
        if len(self._path) >= _MAX_NESTING:
            raise _Hostile(
                f"a sitemap nests elements deeper than {_MAX_NESTING} levels: read up to there"
            )
        if not self._path:
            self.kind = local
        self._path.append(local)
        if local == "loc" and len(self._path) == 3:
            self._loc, self._loc_chars = [], 0

    def _end(self, name: str) -> None:
        if self._loc is not None and len(self._path) == 3:
            root, entry, _ = self._path
            text = "".join(self._loc).strip()
            if self._loc_chars <= _URL_CHARS and text:
                if root == "urlset" and entry == "url":
                    self.pages.append(text)
                elif root == "sitemapindex" and entry == "sitemap":
                    self.sitemaps.append(text)
            self._loc = None
        if self._path:
            self._path.pop()

    def _text(self, data: str) -> None:
        if self._loc is not None:
            self._loc_chars += len(data)
            if self._loc_chars <= _URL_CHARS:
                self._loc.append(data)


_URL_CHARS: Final = 2048
"""The longest URL kept (the guard's ``MAX_URL_CHARS``); a longer ``<loc>`` is skipped."""


def _robots_sitemaps(body: bytes) -> list[str]:
    """The ``Sitemap:`` lines of a robots.txt (any group: they stand outside groups)."""
    found: list[str] = []
    for raw in body[:MAX_ROBOTS_BYTES].splitlines():
        key, colon, value = raw.split(b"#", 1)[0].partition(b":")
        if colon and key.strip().lower() == b"sitemap":
            text = value.strip().decode("utf-8", "replace")
            if text:
                found.append(text)
    return found


def _page_hrefs(html: bytes, base: str) -> list[str]:
    """The start page's ``<a href>`` values, absolute against its ``<base href>`` or URL.

    Runs in a thread: lexbor parses a 2 MiB page in milliseconds, but not in no time.
    """
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    node = tree.css_first("base[href]")
    href = node.attributes.get("href") if node is not None else None
    if href:
        base = urljoin(base, href.strip())
    links: list[str] = []
    for anchor in tree.css("a[href]"):
        value = anchor.attributes.get("href")
        if value and not value.lstrip().lower().startswith(("javascript:", "mailto:", "#")):
            links.append(urljoin(base, value.strip()))
    return links


# -- the map ------------------------------------------------------------------------------------


class _Full(Exception):
    """The map has ``limit`` URLs and found one more: it ends."""


@dataclass(slots=True)
class _Mapper:
    fetcher: WebFetcher
    client: httpx.AsyncClient
    caller: Caller
    limit: int
    same_host: bool
    bounds: MapBounds
    obey: bool = False
    """Check each document (and each redirect hop) against its host's robots.txt."""
    hosts: set[str] = field(default_factory=set)
    urls: dict[str, None] = field(default_factory=dict)
    notes: dict[str, None] = field(default_factory=dict)
    cut: bool = False
    requests: int = 0
    bytes_read: int = 0
    seen_sitemaps: set[str] = field(default_factory=set)
    busy: RetryLater | None = None

    # -- what is kept --

    def note(self, text: str, *, cut: bool = True) -> None:
        self.notes[text] = None
        self.cut = self.cut or cut

    def clean(self, candidate: str, base: str) -> Checked | None:
        """The URL ``candidate`` (joined to ``base``, fragment dropped) if the map keeps it."""
        try:
            url = urldefrag(urljoin(base, candidate)).url
            checked = check_url(url, self.fetcher._allow)
        except (TargetError, ValueError):
            return None
        if self.same_host and checked.host not in self.hosts:
            return None
        return checked

    def sitemap_url(self, candidate: str, base: str, *, named: bool) -> Checked | None:
        """The sitemap ``candidate`` if the map reads it, else None with a note saying why.

        A sitemap robots.txt names (``named``) is read on any host the guard accepts; one an
        index lists, on the index's host (``base``'s) or the start page's.
        """
        try:
            url = urldefrag(urljoin(base, candidate)).url
            checked = check_url(url, self.fetcher._allow)
        except (TargetError, ValueError) as exc:
            why = exc.msg if isinstance(exc, TargetError) else "it is not a URL"
            self.note(f"a sitemap was not read: {why}")
            return None
        if not self.same_host or named or checked.host in self.hosts:
            return checked
        if checked.host == urlsplit(base).hostname:
            return checked
        self.note(
            "a sitemap index lists a sitemap on another host, which the sitemaps protocol "
            "does not allow: not read"
        )
        return None

    def add(self, candidate: str, base: str) -> None:
        """Keep a page URL.

        Raises:
            _Full: the map had ``limit`` URLs already and this one is new.
        """
        checked = self.clean(candidate, base)
        if checked is None:
            return
        url = str(checked.url)
        if url in self.urls:
            return
        if len(self.urls) >= self.limit:
            raise _Full
        self.urls[url] = None

    # -- requests --

    async def request(
        self, checked: Checked, read: Callable[[httpx.Response, Checked, int], Awaitable[T]]
    ) -> T:
        """One document through the fetcher: a pool slot, the guard, the host's budget.

        Raises:
            RetryLater: no pool slot within the fetcher's ``slot_wait``, the host stayed
                blocked, or the site answered 429/503.
            TargetError: as a fetch fails.
            Refused: the guard refused an address the host resolves to (or a redirect).
        """
        fetcher = self.fetcher
        if self.obey:
            await fetcher._obey_robots(checked)
        self.requests += 1
        pool = fetcher._pool
        with trio.move_on_after(fetcher._slot_wait) as waited:
            await pool.acquire(self.caller.name)
        if waited.cancelled_caught:
            raise RetryLater("the fetch pool is all in use")
        try:
            with trio.fail_after(fetcher._timeout):
                return await fetcher._download(self.client, checked, read, robots=self.obey)
        except trio.TooSlowError:
            raise timeout_error(fetcher._timeout) from None
        finally:
            pool.release(self.caller.name)

    def check_status(self, response: httpx.Response) -> None:
        status = response.status_code
        if status in BUSY_STATUSES:
            fetcher = self.fetcher
            raise busy_error(
                status,
                response.headers.get("retry-after"),
                now=fetcher._wall_clock(),
                cap=fetcher._max_retry_after,
            )
        error = status_error(status)
        if error is not None:
            raise error

    async def read_body(
        self, response: httpx.Response, cap: int, what: str, consume: Callable[[bytes], None]
    ) -> None:
        """Feed ``consume`` the decoded body a piece at a time: at most ``cap`` bytes, and at
        most what is left of the map's ``total_bytes``; past either, a note, and the rest is
        not read.

        Raises:
            _Hostile: the body cannot be decompressed (corrupt gzip or deflate).
            _Unsupported: a ``Content-Encoding`` other than gzip and deflate.
        """
        decoded = _Decoded(response.headers.get("content-encoding", ""))
        left = self.bounds.total_bytes - self.bytes_read
        most = min(cap, left)
        count = 0
        try:
            async for raw in response.aiter_raw():
                for piece in decoded.feed(raw):
                    if count + len(piece) > most:
                        self.bytes_read += most - count
                        consume(piece[: most - count])
                        self.note(_over(what, cap, left))
                        return
                    count += len(piece)
                    self.bytes_read += len(piece)
                    consume(piece)
                    await trio.lowlevel.checkpoint()
        except zlib.error:
            raise _Hostile(
                f"{what} could not be decompressed (corrupt gzip or deflate): read up to there"
            ) from None
        consume(decoded.end())

    # -- the three sources --

    async def start_page(self, start: Checked) -> list[str]:
        """Read the start page: keep its final URL, and answer its links (kept later)."""

        async def read(response: httpx.Response, current: Checked, hop: int) -> list[str]:
            self.check_status(response)
            self.hosts.add(current.host)
            final = str(current.url)
            self.add(final, final)
            mime, _ = content_type(response.headers.get("content-type", ""))
            if mime and mime not in _TEXT_MIME:
                return []
            html = bytearray()
            await self.read_body(response, self.bounds.page_bytes, "the start page", html.extend)
            return await trio.to_thread.run_sync(_page_hrefs, bytes(html), final)

        links = await self.request(start, read)
        return links

    async def robots(self, start: Checked) -> list[str]:
        """The sitemaps robots.txt names (none when it cannot be read)."""
        _, robots_url = origin_of(str(start.url))

        async def read(response: httpx.Response, current: Checked, hop: int) -> bytes:
            if not 200 <= response.status_code < 300:
                return b""
            body = bytearray()
            await self.read_body(response, MAX_ROBOTS_BYTES, "robots.txt", body.extend)
            return bytes(body)

        try:
            body = await self.request(check_url(robots_url, self.fetcher._allow), read)
        except (TargetError, Refused, _Hostile, _Unsupported):
            return []
        except RetryLater as busy:
            self.busy = busy
            self.note("robots.txt's host was busy (429/503): its sitemaps may be missed")
            return []
        return _robots_sitemaps(body)

    async def sitemaps(self, first: list[str], base: str, *, named: bool) -> None:
        """Read the sitemaps breadth first, each once, indexes at most ``bounds.depth`` deep.

        ``named``: robots.txt names ``first`` (so they may be on another host)."""
        queue: deque[tuple[Checked, int]] = deque()
        self.enqueue(queue, first, base, 0, named=named)
        while queue:
            checked, depth = queue.popleft()
            if self.requests >= self.bounds.documents:
                self.note(
                    f"{len(queue) + 1} sitemap(s) not read: a map fetches at most "
                    f"{self.bounds.documents} documents"
                )
                return
            if self.bytes_read >= self.bounds.total_bytes:
                self.note(
                    f"{len(queue) + 1} sitemap(s) not read: a map reads at most "
                    f"{self.bounds.total_bytes // 2**20} MiB in all"
                )
                return
            children = await self.sitemap(checked)
            if children and depth + 1 > self.bounds.depth:
                self.note(
                    f"a sitemap index nests deeper than {self.bounds.depth} levels: "
                    "the sitemaps past that were not read"
                )
            elif children:
                self.enqueue(queue, children, str(checked.url), depth + 1)

    def enqueue(
        self,
        queue: deque[tuple[Checked, int]],
        urls: list[str],
        base: str,
        depth: int,
        *,
        named: bool = False,
    ) -> None:
        for candidate in urls:
            checked = self.sitemap_url(candidate, base, named=named)
            if checked is None:
                continue
            key = str(checked.url)
            if key in self.seen_sitemaps:
                self.note("a sitemap index lists a sitemap read already: read once", cut=False)
                continue
            if len(self.seen_sitemaps) >= 4 * self.bounds.documents:
                self.note(
                    "a sitemap index lists more sitemaps than a map reads: the rest were skipped"
                )
                return
            self.seen_sitemaps.add(key)
            queue.append((checked, depth))

    async def sitemap(self, checked: Checked) -> list[str]:
        """Read one sitemap: keep its page URLs, answer the sitemaps an index lists."""
        reader = _SitemapReader()
        children: list[str] = []
        base = str(checked.url)

        async def read(response: httpx.Response, current: Checked, hop: int) -> None:
            self.check_status(response)

            def consume(piece: bytes) -> None:
                reader.feed(piece)
                self.take(reader, children, base)

            try:
                await self.read_body(response, self.bounds.document_bytes, "a sitemap", consume)
                reader.close()
            finally:
                self.take(reader, children, base)

        try:
            await self.request(checked, read)
        except _Hostile as hostile:
            self.note(str(hostile))
        except expat.ExpatError as exc:
            self.note(
                f"a sitemap is not well-formed XML ({expat.ErrorString(exc.code)}): "
                "read up to the error"
            )
        except _Unsupported:
            self.note("a sitemap came in an encoding other than gzip or deflate: not read")
        except RetryLater as busy:
            self.busy = busy
            self.note(f"a sitemap was not read: {busy}")
        except TargetError as exc:
            self.note(f"a sitemap could not be read: {exc.msg}")
        except Refused as refused:
            self.note(f"a sitemap could not be read: {refused.error.msg}")
        if reader.kind not in ("urlset", "sitemapindex", "text", ""):
            self.note("a document named as a sitemap is not one: not read", cut=False)
        return children

    def take(self, reader: _SitemapReader, children: list[str], base: str) -> None:
        pages, reader.pages = reader.pages, []
        for page in pages:
            self.add(page, base)
        children.extend(reader.sitemaps)
        reader.sitemaps.clear()


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 and n % 2**20 == 0 else f"{n // 1024} KiB"


def _over(what: str, cap: int, left: int) -> str:
    if left < cap:
        return f"a map reads at most {_size(left + 0)} in all: {what} was cut there"
    return f"{what} is over {_size(cap)} (decompressed): read its first {_size(cap)}"


async def site_map(
    fetcher: WebFetcher,
    caller: Caller,
    url: str,
    *,
    limit: int = DEFAULT_LIMIT,
    same_host: bool = True,
    robots: bool | None = None,
    bounds: MapBounds = MapBounds(),
    start_page: bool = True,
) -> SiteMap:
    """The URLs of the site of ``url``: the start page, its sitemaps' URLs, its links.

    See the module's docstring for the sources and their order. Every request goes through
    ``fetcher``'s pool (as ``caller``), guard and host budget. ``same_host`` (the default)
    keeps the URLs on the start page's host (and the host it redirects to) only, and reads
    the sitemaps there and those robots.txt names. ``robots``: check every document and
    redirect hop against its host's robots.txt (a disallowed one is a note); None, the
    fetcher's ``robots`` default. ``start_page=False`` reads the sitemaps alone (a crawl's
    seeds: the start page's links are its own to find), not the start page or its links.

    Returns:
        At most ``limit`` URLs, deduplicated, without fragments, each one that the fetcher's
        pre-check accepts; ``complete`` is false when a bound (:class:`MapBounds`, the limit)
        ended the map early or a source could not be read, and ``notes`` says which.

    Raises:
        ValueError: ``limit`` is not from 1 to :data:`MAX_LIMIT`.
        TargetError: the URL fails the pre-check (400), the guard refuses its host (403), or
            the start page failed and no URL was found (the start page's failure).
        RetryLater: the fetch pool or the site was busy and no URL was found.
        trio.ClosedResourceError, RuntimeError: the fetcher is closed, or not open.

    Cancellation: a checkpoint; a cancelled map is abandoned (each request gives back its
    slots), and nothing is kept.
    """
    check_limit(limit)
    client = fetcher._client
    if client is None:
        if fetcher._closed:
            raise trio.ClosedResourceError("this WebFetcher is closed; map inside its block")
        raise RuntimeError("the WebFetcher is not open; use `async with WebFetcher(...)`")
    await trio.lowlevel.checkpoint()
    start = check_url(url, fetcher._allow)
    obey = fetcher._obeys_robots(Options(robots=robots))
    mapper = _Mapper(fetcher, client, caller, limit, same_host, bounds, obey, hosts={start.host})
    failure: TargetError | RetryLater | None = None
    with trio.move_on_after(bounds.seconds) as clock:
        try:
            failure = await _run(mapper, start, start_page)
        except _Full:
            mapper.note(
                f"the site has more URLs than the limit of {limit:,}: ask for a larger limit "
                f"(at most {MAX_LIMIT:,})"
            )
    if clock.cancelled_caught:
        mapper.note(f"the map took its {bounds.seconds:g} s: the URLs found by then")
    if not mapper.urls:
        if failure is not None:
            raise failure
        if mapper.busy is not None:
            raise mapper.busy
    logger.debug(
        "site map: urls=%d requests=%d bytes=%d complete=%s",
        len(mapper.urls),
        mapper.requests,
        mapper.bytes_read,
        not mapper.cut,
    )
    return SiteMap(tuple(mapper.urls), not mapper.cut, tuple(mapper.notes))


async def _run(
    mapper: _Mapper, start: Checked, start_page: bool = True
) -> TargetError | RetryLater | None:
    """Read the three sources into ``mapper`` (the sitemaps alone without ``start_page``);
    the start page's failure, if it failed.

    Raises:
        TargetError: the guard refused the start page's address (403): nothing else is read.
        _Full: the limit is reached.
    """
    failure: TargetError | RetryLater | None = None
    links: list[str] = []
    try:
        links = await mapper.start_page(start) if start_page else []
    except (_Hostile, _Unsupported):
        mapper.note("the start page could not be decompressed: its links were not read")
    except RetryLater as busy:
        failure = busy
        mapper.note(f"the start page was not read ({busy}): its links were not read")
    except Refused as refused:
        raise refused.error from None
    except TargetError as exc:
        failure = exc
        mapper.note(f"the start page could not be read: {exc.msg}")
    named = await mapper.robots(start)
    origin = f"{start.url.scheme}://{start.url.netloc.decode('ascii')}"
    await mapper.sitemaps(named or [origin + "/sitemap.xml"], origin + "/", named=bool(named))
    base = str(start.url)
    for link in links:
        mapper.add(link, base)
    return failure
