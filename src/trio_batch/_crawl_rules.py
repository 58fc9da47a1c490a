"""What a crawl follows: the canonical form of a URL, and the rules that judge each link found.

A crawl (:mod:`trio_batch._crawl`) deduplicates what it finds by a **canonical key** and follows
a link only when its rules allow: this module is both. It knows nothing of HTTP, the store or
the engine; the engine calls :meth:`CrawlRules.judge` for every link of every page (up to 1,000
a page), so it is written for speed: a few microseconds a URL (``bench/crawl.py`` measures it).

The canonical form (:func:`canonical_url`), in the order it is built:

1. Leading and trailing C0 control characters and spaces are removed, and tabs and line breaks
   anywhere (as browsers do); a URL over 2,048 characters, before or after, is not crawlable.
2. The scheme is lower-cased; only ``http`` and ``https`` are crawlable. ``http`` and
   ``https`` stay distinct keys: a site that links both usually redirects one to the other,
   and the redirect's final URL is what the crawl's visited set records.
3. The host is lower-cased, a trailing dot dropped, non-ASCII labels written in IDNA
   (UTS #46, IDNA 2008, with the ``idna`` package; Python's IDNA 2003 codec without it); IPv4
   literals keep their dotted form, IPv6 literals are compressed (``[2001:db8::1]``). A URL
   with credentials (``user@``), a percent sign or other characters that no host name has, an
   empty label, or a port out of range is not crawlable. The default port (80, 443) is dropped.
4. Percent-encoding is normalised in the path and the query: escapes of unreserved characters
   (letters, digits, ``-._~``) are decoded, other escapes upper-cased (``%2f`` -> ``%2F``,
   never decoded: ``%2F`` is not ``/``), and characters that must be escaped are escaped as
   UTF-8 (spaces, controls, ``"<>\\^`{|}[]``, non-ASCII, a ``%`` not starting an escape).
5. Path parameters ``;jsessionid=...`` are removed (a session id is not part of a page).
6. Dot segments (``.``, ``..``, also when they were written ``%2E``) are resolved (RFC 3986
   §5.2.4); an empty path is ``/``.
7. A last segment ``index.html``, ``index.htm`` or ``index.php`` is the directory, and a
   trailing ``/`` is dropped (except the root's): ``/a/``, ``/a`` and ``/a/index.html`` are one
   key, ``/a``. They are one page on nearly every site (a server answers the other two with a
   redirect or the same file), and the issue's C2 complaint (a page fetched several times) is
   far commoner than a site where they differ. The key is for deduplication: the crawl fetches
   the URL as found, never the key, so a site that answers only ``/a/`` still works.
8. The query keeps its parameters **in their order** (sorting would merge ``?a=1&b=2`` with
   ``?b=2&a=1``, but a site's own links repeat one order, and a few sites read parameters in
   order; the per-path cap below bounds what unsorted variants can cost); empty parameters
   (``&&``) and the tracking and session parameters of :data:`TRACKING_PARAMETERS` are
   removed (names compared without case), and an empty query is dropped with its ``?``.
9. The fragment is dropped (``#!`` too: the AJAX crawling scheme is long retired).

``www.`` and the bare host are different hosts: a crawl of scope ``host`` started on one never
fetches the other. With scope ``domain`` they are one site, and a crawl's key drops a leading
``www.`` (:meth:`CrawlRules.key`), so a site that serves both without redirecting is fetched once.

:class:`CrawlRules` judges each link: ``("key", "")`` when it may be admitted, else ``("",
reason)``, with the reasons checked in this order: ``depth`` (deeper than ``max_depth``),
``scope`` (another host, registrable domain or path prefix; or not crawlable at all),
``pattern`` (the include/exclude globs), ``trap`` (:data:`TRAP_RULES`). ``duplicate``,
``robots`` and ``limit`` are the engine's reasons: the rules cannot see the visited set,
robots.txt or the store.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, NamedTuple, final

from ._crawl import CrawlSpec

__all__ = [
    "MAX_KEY_CHARS",
    "TRACKING_PARAMETERS",
    "TRAP_RULES",
    "CrawlRules",
    "canonical_url",
    "registrable_domain",
]

MAX_KEY_CHARS: Final = 2048
"""The longest URL, as found and as a key, that a crawl follows (the guard's limit)."""

TRACKING_PARAMETERS: Final = frozenset(
    {
        # analytics and ad click ids (utm_* is a prefix rule, below)
        "gclid",
        "gclsrc",
        "dclid",
        "gbraid",
        "wbraid",
        "fbclid",
        "msclkid",
        "yclid",
        "twclid",
        "ttclid",
        "li_fat_id",
        "igshid",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "_hsenc",
        "_hsmi",
        "mkt_tok",
        "ref_src",
        "ref_url",
        "oly_anon_id",
        "oly_enc_id",
        "vero_id",
        "rb_clickid",
        "s_cid",
        # session ids (sid only when its value looks like a token: see _is_tracking)
        "jsessionid",
        "phpsessid",
        "aspsessionid",
        "sessionid",
        "session_id",
        "cfid",
        "cftoken",
    }
)
"""Query parameters that say who sent a visitor or which session it is, never which page: a key
drops them, with every parameter whose name starts ``utm_``, and ``sid`` when its value is a
token (16 or more letters, digits, ``-`` or ``_``; a short ``sid=3`` may name a section)."""

MAX_TRAP_CHARS: Final = 1024
"""Longest path and query (together) a crawl follows."""
MAX_SEGMENTS: Final = 64
"""Most path segments a crawl follows."""
SEGMENT_REPEATS: Final = 3
"""A path with a segment this many times is a trap (``/a/b/a/c/a``)."""
MAX_PARAMETERS: Final = 16
"""Most query parameters a crawl follows."""
PARAMETER_REPEATS: Final = 3
"""A query naming one parameter this many times is a trap (``?p=1&p=2&p=3``, a query that grows)."""
QUERY_VARIANTS: Final = 50
"""Most URLs one path may have that differ only in their query, per :class:`CrawlRules`."""
VARIANT_PATHS: Final = 4096
"""How many paths' query variants a :class:`CrawlRules` remembers (least recently seen
forgotten first): its memory stays bounded whatever the site."""

TRAP_RULES: Final = (
    f"path and query over {MAX_TRAP_CHARS} characters",
    f"over {MAX_SEGMENTS} path segments",
    f"a path segment {SEGMENT_REPEATS} or more times, or a run of two or more segments "
    "twice in a row (/a/b/a/b)",
    f"over {MAX_PARAMETERS} query parameters, or one named {PARAMETER_REPEATS} or more times",
    f"past {QUERY_VARIANTS} query variants of one path",
)
"""What :meth:`CrawlRules.judge` calls a trap. A calendar or pager written in the path
(``/2031/05/``) has none of these marks: ``max_depth`` and the ``limit`` bound it."""

_DEFAULT_PORTS: Final = {"http": "80", "https": "443"}
_INDEX_NAMES: Final = frozenset({"index.html", "index.htm", "index.php"})
_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_EDGES: Final = "".join(chr(c) for c in range(0x21))  # C0 controls and space
_TABS: Final = {ord("\t"): None, ord("\n"): None, ord("\r"): None}
# An escape, or a character the component cannot hold unescaped (RFC 3986's pchar; the query
# adds "/" and "?"). "%" alone falls to the second branch and becomes "%25".
_PATH_FIX: Final = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~!$&'()*+,;=:@/]")
_QUERY_FIX: Final = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?]")
_JSESSIONID: Final = re.compile(r";jsessionid=[^/;]*", re.IGNORECASE)
_HOST: Final = re.compile(r"(?:[a-z0-9_-]{1,63}\.)*[a-z0-9_-]{1,63}")
_IPV4: Final = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{16,}")
_GLOB_PIECES: Final = re.compile(r"\*\*|\*|\?|[^*?]+")
_CACHED_CHARS: Final = 256  # longer URLs are rare and would make the cache's memory large


class _Parts(NamedTuple):
    """A canonical URL in pieces: ``origin`` is ``scheme://host[:port]``."""

    origin: str
    host: str
    path: str
    query: str

    @property
    def url(self) -> str:
        return f"{self.origin}{self.path}?{self.query}" if self.query else self.origin + self.path


def canonical_url(url: str) -> str | None:
    """The canonical form of ``url`` (the module's docstring lists each rule), or None when a
    crawl cannot follow it: not http(s), no host or a bad one, credentials, over 2,048
    characters, or not parsable. ``canonical_url(canonical_url(u)) == canonical_url(u)``."""
    parts = _parts(url)
    return None if parts is None else parts.url


def fetchable_url(url: str) -> str:
    """``url`` as a crawl fetches it: its spelling kept (a site that answers only ``/a/`` still
    works; the key is for deduplication only), without its fragment, and with what its path and
    query cannot hold unescaped escaped as a browser sends it (a space as ``%20``), so that a
    link written loosely is fetched rather than refused. Call it on a URL :meth:`CrawlRules.judge`
    admitted (http(s), a good host)."""
    text = url.strip(_EDGES).translate(_TABS)
    scheme, _, rest = text.partition("://")
    netloc, path, query = _pieces(rest)
    path = _PATH_FIX.sub(_fix, path) or "/"
    return f"{scheme}://{netloc}{path}" + (f"?{_QUERY_FIX.sub(_fix, query)}" if query else "")


def _parts(url: str) -> _Parts | None:
    if not isinstance(url, str) or len(url) > MAX_KEY_CHARS:
        return None
    return _cached_parts(url) if len(url) <= _CACHED_CHARS else _split(url)


@functools.lru_cache(maxsize=4096)  # a site's pages repeat their menus: most links come again
def _cached_parts(url: str) -> _Parts | None:
    return _split(url)


def _split(url: str) -> _Parts | None:
    text = url.strip(_EDGES)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.translate(_TABS)
    scheme, sep, rest = text.partition(":")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS or not rest.startswith("//"):
        return None
    if not text.isascii() and not _is_utf8(text):
        return None
    netloc, path, query = _pieces(rest[2:])
    origin = _origin(scheme, netloc)
    if origin is None:
        return None
    host = origin[1]
    path = _normal_path(path)
    query = _normal_query(query) if query else ""
    parts = _Parts(origin[0], host, path, query)
    return parts if len(parts.url) <= MAX_KEY_CHARS else None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _pieces(rest: str) -> tuple[str, str, str]:
    """Authority, path and query of what follows ``scheme://`` (the fragment dropped)."""
    rest = rest.partition("#")[0]
    rest, _, query = rest.partition("?")
    slash = rest.find("/")
    if slash < 0:
        return rest, "", query
    return rest[:slash], rest[slash:], query


@functools.lru_cache(maxsize=1024)  # a site's links name a few hosts, over and over
def _origin(scheme: str, netloc: str) -> tuple[str, str] | None:
    """``scheme://host[:port]`` and the host, or None for a bad authority."""
    if "@" in netloc or not netloc:
        return None
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            return None
        host, port = _ipv6(netloc[1:end]), netloc[end + 1 :]
        if port and not port.startswith(":"):
            return None
        port = port[1:]
    else:
        name, _, port = netloc.partition(":")
        host = _host(name)
    if host is None:
        return None
    if port:
        if not (port.isascii() and port.isdigit()) or len(port) > 5 or not 0 < int(port) < 65536:
            return None
        port = str(int(port))
    if not port or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}", host
    return f"{scheme}://{host}:{port}", host


def _ipv6(literal: str) -> str | None:
    if "%" in literal:  # a zone: never a web address
        return None
    try:
        return f"[{ipaddress.IPv6Address(literal).compressed}]"
    except ValueError:
        return None


def _host(name: str) -> str | None:
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > 253:
        return None
    host = name.lower() if name.isascii() else _idna(name)
    if host is None or not _HOST.fullmatch(host) or len(host) > 253:
        return None
    return host  # a dotted IPv4 address is already in its one form (any other is a name here)


def _idna(name: str) -> str | None:
    """``name`` in IDNA: each non-ASCII label as ``xn--``, after UTS #46 mapping."""
    try:
        import idna  # the web extra's (through httpx); optional here
    except ImportError:
        return _idna_2003(name)
    try:
        mapped = idna.uts46_remap(name, std3_rules=False, transitional=False)
        return ".".join(
            label.lower() if label.isascii() else idna.alabel(label).decode("ascii")
            for label in mapped.split(".")
        )
    except (idna.IDNAError, UnicodeError, ValueError):
        return None


def _idna_2003(name: str) -> str | None:
    try:
        return name.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return None


def _fix(match: re.Match[str]) -> str:
    """One escape normalised, or one character escaped."""
    found = match.group()
    if len(found) == 3:
        char = chr(int(found[1:], 16))
        return char if char in _UNRESERVED else found.upper()
    return "".join(f"%{byte:02X}" for byte in found.encode("utf-8"))


def _normal_path(path: str) -> str:
    path = _PATH_FIX.sub(_fix, path)
    if ";" in path:
        path = _JSESSIONID.sub("", path)
    if "/." in path:
        path = _without_dots(path)
    if not path:
        return "/"
    while len(path) > 1:  # the directory form: no index file, no trailing slash
        head, _, last = path.rpartition("/")
        if last and last not in _INDEX_NAMES:
            break
        path = head or "/"
    return path


def _without_dots(path: str) -> str:
    """RFC 3986 §5.2.4 on an absolute path."""
    segments = path.split("/")
    out: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")
    return "/" + "/".join(out)


def _normal_query(query: str) -> str:
    query = _QUERY_FIX.sub(_fix, query)
    return "&".join(p for p in query.split("&") if p and not _is_tracking(p))


def _is_tracking(parameter: str) -> bool:
    name, _, value = parameter.partition("=")
    name = name.lower()
    if name in TRACKING_PARAMETERS or name.startswith("utm_"):
        return True
    return name == "sid" and _TOKEN.fullmatch(value) is not None


# -- registrable domains ----------------------------------------------------------------------


@functools.cache
def _suffix_list() -> Callable[[str], str | None] | None:
    """The Public Suffix List's registrable-domain lookup (``publicsuffixlist``, offline), or
    None without the package. Loaded once a process (about 0.1 s)."""
    try:
        from publicsuffixlist import PublicSuffixList
    except ImportError:
        return None
    lookup: Callable[[str], str | None] = PublicSuffixList().privatesuffix
    return lookup


_SECOND_LEVEL: Final = frozenset({"co", "com", "net", "org", "gov", "edu", "ac", "or", "ne", "go"})


@functools.lru_cache(maxsize=4096)
def registrable_domain(host: str) -> str:
    """The registrable domain of a canonical host (``www.example.co.uk`` -> ``example.co.uk``):
    the Public Suffix List's answer (the ``publicsuffixlist`` package, in the web extra, offline).

    An address, a single label, or a host that is itself a public suffix is its own domain.
    Without the package, the documented fallback: the last two labels, or three when the last
    is a two-letter country code and the one before it a common second level (``co``, ``com``,
    ``net``, ``org``, ``gov``, ``edu``, ``ac``, ``or``, ``ne``, ``go``: ``example.co.uk``).
    """
    if host.startswith("[") or _IPV4.fullmatch(host) or "." not in host:
        return host
    lookup = _suffix_list()
    if lookup is not None:
        return lookup(host) or host
    labels = host.split(".")
    keep = 3 if len(labels[-1]) == 2 and labels[-2] in _SECOND_LEVEL else 2
    return ".".join(labels[-keep:])


# -- the rules --------------------------------------------------------------------------------


def _glob(pattern: str) -> str:
    """A regular expression of one include/exclude glob (see :class:`CrawlSpec`)."""
    if not pattern.startswith(("/", "*")):
        pattern = "/" + pattern
    tail = ""
    if pattern.endswith("/**"):
        pattern, tail = pattern[:-3], "(?:/.*)?"  # "/docs/**" also matches "/docs" itself
    elif len(pattern) > 1 and pattern.endswith("/"):
        pattern = pattern[:-1]  # keys never end in "/"
    out: list[str] = []
    for piece in _GLOB_PIECES.findall(pattern):
        if piece == "**":
            out.append(".*")
        elif piece == "*":
            out.append("[^/]*")
        elif piece == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(_QUERY_FIX.sub(_fix, piece)))
    return "".join(out) + tail


def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{_glob(p)})" for p in patterns), re.DOTALL)


@final
class CrawlRules:
    """The rules of one crawl: its start key and a judge of each URL found.

    One object per crawl per process: it keeps, for at most :data:`VARIANT_PATHS` paths, the
    query variants it has admitted (at most :data:`QUERY_VARIANTS` each), so its memory is
    bounded whatever the site. That count is this object's: on a fleet each instance (and a
    restarted one) counts afresh, so a path may get up to that many variants per instance; the
    crawl's frontier cap (:attr:`CrawlSpec.frontier_cap`) bounds the total whatever happens.
    Judging the same URL again does not use up a variant. Not thread-safe (one Trio thread).

    Raises:
        ValueError: the start URL cannot be crawled (not http(s), no host, credentials, too long).
    """

    __slots__ = (
        "_domain",
        "_exclude",
        "_fold_www",
        "_include",
        "_max_depth",
        "_prefix",
        "_scope",
        "_start",
        "_variants",
        "start_key",
    )

    def __init__(self, spec: CrawlSpec) -> None:
        start = _parts(spec.url)
        if start is None:
            raise ValueError(
                f"CrawlSpec.url cannot be crawled (got {spec.url[:100]!r}): write an http or "
                "https URL with a host and no user@ part, at most 2,048 characters"
            )
        self._start = start
        self._scope = spec.scope
        self._max_depth = spec.max_depth
        self._fold_www = spec.scope == "domain"
        self._domain = registrable_domain(start.host) if spec.scope == "domain" else ""
        self._prefix = _prefix_of(spec.prefix, start.path) if spec.scope == "prefix" else ""
        self._include = _globs(spec.include)
        self._exclude = _globs(spec.exclude)
        self._variants: OrderedDict[int, set[int]] = OrderedDict()
        self.start_key: str = self._key(start)
        """The start URL's key."""

    def key(self, url: str) -> str | None:
        """The crawl's deduplication key of ``url``, judging nothing (for a redirect's final
        URL or a page's ``rel=canonical``): :func:`canonical_url`, with a leading ``www.``
        dropped when the scope is ``domain``; None when it cannot be crawled."""
        parts = _parts(url)
        return None if parts is None else self._key(parts)

    def _key(self, parts: _Parts) -> str:
        host = parts.host
        if self._fold_www and host.startswith("www.") and registrable_domain(host) != host:
            return parts.url.replace("://www.", "://", 1)  # www. is not the domain's own label
        return parts.url

    def in_scope(self, url: str) -> bool:
        """Whether ``url`` can be crawled and is in the crawl's scope (judging nothing else:
        what a redirect may lead to)."""
        parts = _parts(url)
        return parts is not None and self._in_scope(parts)

    def judge(self, url: str, depth: int) -> tuple[str, str]:
        """``(key, "")`` when a crawl may admit ``url`` found at ``depth``, else ``("",
        reason)``: ``depth``, ``scope``, ``pattern`` or ``trap``, checked in that order (the
        module's docstring). Only an admitted URL counts toward its path's query variants."""
        if depth > self._max_depth:
            return "", "depth"
        parts = _parts(url)
        if parts is None or not self._in_scope(parts):
            return "", "scope"
        if (self._include is not None or self._exclude is not None) and not self._matches(parts):
            return "", "pattern"
        if self._is_trap(parts):
            return "", "trap"
        return self._key(parts), ""

    def _in_scope(self, parts: _Parts) -> bool:
        if self._scope == "domain":
            return parts.host == self._start.host or registrable_domain(parts.host) == self._domain
        if parts.host != self._start.host:
            return False
        if self._scope == "prefix":
            prefix = self._prefix
            return prefix == "/" or parts.path == prefix or parts.path.startswith(prefix + "/")
        return True

    def _matches(self, parts: _Parts) -> bool:
        target = f"{parts.path}?{parts.query}" if parts.query else parts.path
        if self._include is not None and self._include.fullmatch(target) is None:
            return False
        return self._exclude is None or self._exclude.fullmatch(target) is None

    def _is_trap(self, parts: _Parts) -> bool:
        path, query = parts.path, parts.query
        if len(path) + len(query) > MAX_TRAP_CHARS:
            return True
        if path.count("/") > 2 and _path_repeats(path):
            return True
        if not query:
            return False
        if "&" in query and _query_repeats(query):
            return True
        return self._too_many_variants(hash(parts.origin + path), hash(query))

    def _too_many_variants(self, path: int, query: int) -> bool:
        seen = self._variants.get(path)
        if seen is None:
            seen = self._variants[path] = set()
            if len(self._variants) > VARIANT_PATHS:
                self._variants.popitem(last=False)
        else:
            self._variants.move_to_end(path)
        if query in seen:
            return False
        if len(seen) >= QUERY_VARIANTS:
            return True
        seen.add(query)
        return False


def _path_repeats(path: str) -> bool:
    """Whether a segment comes :data:`SEGMENT_REPEATS` times, or a run of two or more twice in
    a row (``/a/b/a/b``). Linear: once a segment may come only twice, each second coming is
    the one place such a run can start again."""
    segments = path.split("/")[1:]
    if len(segments) > MAX_SEGMENTS:
        return True
    if len(set(segments)) == len(segments):  # the common case, in C
        return False
    first: dict[str, int] = {}
    counts: dict[str, int] = {}
    again: list[tuple[int, int]] = []
    for j, segment in enumerate(segments):
        if not segment:
            continue
        counts[segment] = n = counts.get(segment, 0) + 1
        if n >= SEGMENT_REPEATS:
            return True
        if n == 1:
            first[segment] = j
        else:
            again.append((first[segment], j))
    return any(j - i >= 2 and segments[i:j] == segments[j : 2 * j - i] for i, j in again)


def _query_repeats(query: str) -> bool:
    parameters = query.split("&")
    if len(parameters) > MAX_PARAMETERS:
        return True
    counts: dict[str, int] = {}
    for parameter in parameters:
        name = parameter.partition("=")[0]
        counts[name] = n = counts.get(name, 0) + 1
        if n >= PARAMETER_REPEATS:
            return True
    return False


def _prefix_of(prefix: str, start_path: str) -> str:
    """The path prefix of a ``prefix`` crawl, in canonical form: ``prefix`` if given, else the
    start URL's path less a last segment that names a file (one with a ``.``)."""
    if prefix:
        path = _normal_path(prefix if prefix.startswith("/") else "/" + prefix)
    else:
        head, _, last = start_path.rpartition("/")
        path = (head or "/") if "." in last else start_path
    return path
