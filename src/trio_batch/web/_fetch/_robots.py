"""robots.txt (RFC 9309): the parser, the per-host cache, and the verdict a fetch acts on.

Three parts, each usable alone:

- :func:`parse_robots` reads a robots.txt body for one product token (ours is
  :data:`PRODUCT_TOKEN`) into :class:`RobotsRules`: the group that names the token
  (case-insensitively; several such groups are merged), else the ``*`` group, else no rules.
  Between ``Allow`` and ``Disallow`` the longest pattern wins and ``Allow`` wins a tie;
  ``*`` matches any run of characters and a final ``$`` anchors the end. Paths and patterns
  are compared in one normal form (RFC 9309 §2.2.2): octets outside printable ASCII and the
  printable ones a URI may not hold raw (``"<>\\^`{|}``, which a request sends escaped) are
  percent-encoded, a percent-encoded unreserved character is decoded, other escapes get
  upper-case hex, and the URL's own ``*`` and ``$`` are escaped so that a pattern's ``%2A``
  and ``%24`` match them (§2.2.3); a URL's path then loses its dot segments (RFC 3986 §5.2.4:
  ``/a/%2e%2e/private`` is ``/private`` to the site). ``Crawl-delay`` (not in the RFC) is
  read from the chosen group, capped, and the cap reported.
- :func:`rules_for_status` applies the status rules of §2.3.1: 2xx is parsed, a 4xx allows
  everything, a 5xx (and 429, as Google reads it: a rate limit is the site asking for less,
  not a missing file) is *unreachable*, which disallows everything until it is read again.
- :class:`RobotsCache` keeps one :class:`RobotsRules` per origin (scheme, host, port) for a
  TTL (24 h at most, §2.4), at most ``max_entries`` of them (least recently used first out),
  and fetches each origin's file once however many tasks ask at the same time. It fetches
  through a function the embedder injects, so the fetcher routes the request through its own
  guard and host budget.

Why the matcher is not a regular expression: a site writes the patterns, and a pattern such as
``/*a*a*a…*b`` makes a backtracking engine run for an exponential time. A pattern here is its
literal segments between stars; the first must be a prefix of the path, each next one is found
(``str.find``) after the previous, the leftmost place being always the best (with ``*`` the only
wildcard, an earlier match never rules out a later one), and a ``$`` pattern's last segment must
end the path. That is one forward pass over the path per pattern. A file is read up to
:data:`MAX_ROBOTS_BYTES` (the least the RFC allows, §2.5) and the rest ignored, so a check
costs at most the number of rules (bounded by the size) times the path's length
(``_guard.MAX_URL_CHARS``), done in C.

Nothing here logs a URL or a host.
"""

from __future__ import annotations

import logging
import math
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Final, final
from urllib.parse import urlsplit

import trio

from ..._errors import RetryLater, TargetError

logger = logging.getLogger("trio_batch.web")

PRODUCT_TOKEN: Final = "trio-batch"
"""The product token robots.txt groups name us by (``User-agent: trio-batch``)."""

MAX_ROBOTS_BYTES: Final = 500 * 1024
"""Bytes of a robots.txt that are read; the rest is ignored (RFC 9309 §2.5: at least 500 KiB).

A fetcher needs to read no more than this (plus one byte, to know it was cut)."""

ROBOTS_REDIRECTS: Final = 5
"""Redirects a robots.txt fetch follows at least (RFC 9309 §2.3.1.2: "at least five")."""

DEFAULT_TTL: Final = 24 * 3600.0
"""Seconds a fetched robots.txt is used (RFC 9309 §2.4: not more than 24 hours)."""

UNREACHABLE_TTL: Final = 30.0
"""Seconds an unreachable answer (5xx, 429, no connection) is remembered.

Long enough that the targets of one host queued at the same moment share one fetch, short
enough that a host which recovers is read again soon: the caller's backoff, not this cache,
decides when that host is tried again."""

DEFAULT_MAX_CRAWL_DELAY: Final = 60.0
"""The largest ``Crawl-delay`` honoured, in seconds (spider-rs caps at 60 s too).

A site asking for an hour between requests would stall a batch for a day; past the cap the
delay is capped and the verdict says so, so the caller can report it."""

DEFAULT_MAX_ENTRIES: Final = 4096
"""Origins a :class:`RobotsCache` remembers (each holds its parsed rules)."""

PARSE_IN_THREAD_BYTES: Final = 64 * 1024
"""Bodies larger than this are parsed in a worker thread (a 500 KiB one takes a noticeable
fraction of a second of CPU, which would otherwise stall every task of the event loop)."""

CHECK_IN_THREAD_STEPS: Final = 1_000_000
"""Checks whose rules times path length exceed this run in a worker thread.

A hostile file of 25,000 wildcard rules against a 2,000-character path costs about 0.1 s of
CPU per check (measured: ``tests/web/test_robots.py``'s many-rules file); an ordinary file
(hundreds of rules, short paths) costs microseconds and stays on the event loop."""

QUOTE_CHARS: Final = 120
"""The most characters of a pattern quoted in a verdict's ``rule`` (a pattern may be 500 KiB)."""

_TOKEN = re.compile(r"[A-Za-z_-]+")
_AGENT = re.compile(rb"[A-Za-z_-]+")
_DELAY = re.compile(rb"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_NOT_IN_URIS = rb'"<>\\^`{|}'
"""Printable ASCII that RFC 3986 neither reserves nor leaves unreserved: escaped to compare."""
_PATTERN_ESCAPES = re.compile(rb"%[0-9A-Fa-f]{2}|%|[^\x21-\x7e]|[" + _NOT_IN_URIS + rb"]")
_PATH_ESCAPES = re.compile(rb"%[0-9A-Fa-f]{2}|%|[^\x21-\x7e]|[*$" + _NOT_IN_URIS + rb"]")
_BOM_PREFIXES = (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef")
_BLANKS = re.compile(rb"[ \t]+")
_STARS = re.compile(r"\*+")

_USER_AGENT_KEYS: Final = frozenset({b"user-agent", b"useragent", b"user agent"})
_ALLOW_KEYS: Final = frozenset({b"allow"})
# Misspellings Google's parser accepts too (RFC 9309 §2.2.4 lets a crawler be lenient).
_DISALLOW_KEYS: Final = frozenset(
    {b"disallow", b"dissallow", b"dissalow", b"disalow", b"diasllow", b"disallaw"}
)
_DELAY_KEYS: Final = frozenset({b"crawl-delay", b"crawldelay", b"crawl delay"})


# -- normal form ------------------------------------------------------------------------------


def _escape(match: re.Match[bytes]) -> bytes:
    """One spot of the normal form: decode an unreserved escape, upper-case the others."""
    text = match.group()
    if len(text) == 3:
        octet = int(text[1:], 16)
        return bytes((octet,)) if octet in _UNRESERVED else text.upper()
    return b"%%%02X" % text[0]


def normalise_path(raw: bytes) -> str:
    """A URL's path (and query) in the form patterns are compared in (RFC 9309 §2.2.2-3).

    ``*`` and ``$`` become ``%2A`` and ``%24``: in a pattern they are special, so a pattern
    names a literal one by its escape. The path's dot segments are removed once its escapes
    are normal (a ``%2E`` is a ``.``), as a site resolves them.
    """
    text = _PATH_ESCAPES.sub(_escape, raw).decode("ascii")
    path, question, query = text.partition("?")
    return _without_dot_segments(path) + question + query


def _without_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 on an absolute path: ``/a/./b/../c`` is ``/a/c``."""
    if "." not in path:
        return path
    kept: list[str] = []
    segments = path.split("/")[1:]
    for segment in segments:
        if segment == "..":
            if kept:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    trailing = segments[-1] in (".", "..") if segments else False
    return "/" + "/".join(kept) + ("/" if trailing and kept else "")


def _normalise_pattern(raw: bytes) -> str:
    return _PATTERN_ESCAPES.sub(_escape, raw).decode("ascii")


def path_of(url: str) -> str:
    """The normalised path and query of ``url`` (absolute, or a path starting with ``/``)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return normalise_path(path.encode("utf-8", "surrogatepass"))


# -- rules and verdicts -----------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class RobotsVerdict:
    """What robots.txt says about one URL, for the fetch about to request it.

    ``allowed`` False with ``unreachable`` False: a rule forbids it; ``rule`` quotes that rule
    (``"Disallow: /private/"``, the pattern as compared: percent-encoding normalised, cut to
    :data:`QUOTE_CHARS`). ``allowed`` True: ``rule`` is the ``Allow`` rule that won, or None
    when no rule matched (or the file allows all). ``unreachable``: the site's robots.txt
    could not be read (5xx, 429, no connection), which disallows everything for now (RFC 9309
    §2.3.1.4): the caller backs the host off as for a 503 and, past its limit, fails the
    target as disallowed; ``unreachable_for`` is how long it has been so (seconds since the
    first unreachable answer with no good read after it, as a :class:`RobotsCache` saw it; 0
    on a first failure). ``crawl_delay`` is the least time between two requests to the host
    (seconds, None when the site sets none), capped at the cache's ``max_crawl_delay``;
    ``crawl_delay_asked`` is what the site asked for.
    """

    allowed: bool
    rule: str | None = None
    crawl_delay: float | None = None
    crawl_delay_asked: float | None = None
    unreachable: bool = False
    unreachable_for: float = 0.0

    @property
    def crawl_delay_capped(self) -> bool:
        """Whether the site asked for a longer ``Crawl-delay`` than is honoured."""
        return (
            self.crawl_delay is not None
            and self.crawl_delay_asked is not None
            and self.crawl_delay_asked > self.crawl_delay
        )


def obey(verdict: RobotsVerdict, *, block_limit: float, hop: bool = False) -> dict[str, object]:
    """What a fetch does with its URL's verdict: refuse it, back off, or go on.

    ``hop``: the URL is where a redirect leads (the message says so), not the target's own.

    Returns:
        What the result's ``meta`` says of a capped ``Crawl-delay`` (empty when none).

    Raises:
        TargetError: disallowed (403, quoting the rule), or the file stayed unreachable for
            ``block_limit`` seconds or more (503).
        RetryLater: the file is unreachable for now: the host is backed off as for a 503.
    """
    if verdict.unreachable:
        if verdict.unreachable_for < block_limit:
            raise RetryLater("the site's robots.txt could not be read")
        raise TargetError(
            f"the site's robots.txt could not be read for {verdict.unreachable_for:.0f} s "
            "(a 5xx or no answer), which RFC 9309 reads as disallowing everything",
            hint="try these targets again when the site is back",
            status=503,
        )
    if not verdict.allowed:
        where = (
            "the page redirects to a URL that robots.txt disallows"
            if hop
            else "robots.txt disallows this URL"
        )
        raise TargetError(
            f"{where} for trio-batch ({verdict.rule})",
            hint="the site asks crawlers not to fetch this path: fetch a page it allows, "
            "or ask its operator",
            status=403,
        )
    if verdict.crawl_delay_capped:
        return {"crawl_delay": {"asked": verdict.crawl_delay_asked, "used": verdict.crawl_delay}}
    return {}


@dataclass(frozen=True, slots=True)
class _Rule:
    """One ``Allow`` or ``Disallow`` pattern, split at its stars."""

    allow: bool
    length: int
    """Octets of the normalised pattern: the longest match wins (RFC 9309 §2.2.2)."""
    segments: tuple[str, ...]
    """The literal runs between stars; the first is a prefix, the others are searched for."""
    anchored: bool
    """The pattern ended in ``$``: its last segment must end the path."""
    text: str

    def matches(self, path: str) -> bool:
        segments = self.segments
        if not path.startswith(segments[0]):
            return False
        if len(segments) == 1:
            return not self.anchored or len(path) == len(segments[0])
        pos = len(segments[0])
        for segment in segments[1:-1]:
            found = path.find(segment, pos)
            if found < 0:
                return False
            pos = found + len(segment)
        last = segments[-1]
        if self.anchored:
            return len(path) - len(last) >= pos and path.endswith(last)
        return path.find(last, pos) >= 0


def _rule(allow: bool, raw: bytes) -> _Rule:
    pattern = _normalise_pattern(raw)
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    # Only a final '$' anchors; anywhere else it is the character, as in the URL's form.
    body = _STARS.sub("*", body.replace("$", "%24"))
    segments = tuple(body.split("*"))
    quoted = pattern if len(pattern) <= QUOTE_CHARS else pattern[:QUOTE_CHARS] + "..."
    return _Rule(
        allow=allow,
        length=len(pattern),
        segments=segments,
        # "/a*$" is "/a": a star before the anchor matches any ending.
        anchored=anchored and segments[-1] != "",
        text=f"{'Allow' if allow else 'Disallow'}: {quoted}",
    )


@final
class RobotsRules:
    """One robots.txt as read for one product token: the group's rules and crawl delay.

    Made by :func:`parse_robots` (or :func:`rules_for_status`); immutable, so one instance
    serves every task that checks URLs of its origin.
    """

    __slots__ = ("_rules", "crawl_delay", "crawl_delay_asked", "unreachable")

    def __init__(
        self,
        rules: list[_Rule],
        *,
        crawl_delay_asked: float | None = None,
        max_crawl_delay: float = DEFAULT_MAX_CRAWL_DELAY,
        unreachable: bool = False,
    ) -> None:
        unique = {(r.allow, r.segments, r.anchored): r for r in rules}.values()
        # Longest first, Allow before Disallow at one length: the first match decides.
        self._rules = sorted(unique, key=lambda r: (-r.length, not r.allow))
        self.crawl_delay_asked = crawl_delay_asked
        self.crawl_delay = (
            None if crawl_delay_asked is None else min(crawl_delay_asked, max_crawl_delay)
        )
        self.unreachable = unreachable

    def __len__(self) -> int:
        """The number of distinct rules of the group that applies."""
        return len(self._rules)

    def check(self, url: str) -> RobotsVerdict:
        """The verdict on ``url`` (absolute, or a path starting with ``/``)."""
        return self.check_path(path_of(url))

    def check_path(self, path: str) -> RobotsVerdict:
        """The verdict on a path already in normal form (:func:`path_of`)."""
        if self.unreachable:
            return RobotsVerdict(allowed=False, unreachable=True)
        delay, asked = self.crawl_delay, self.crawl_delay_asked
        if path == "/robots.txt":  # implicitly allowed (RFC 9309 §2.2.2)
            return RobotsVerdict(allowed=True, crawl_delay=delay, crawl_delay_asked=asked)
        for rule in self._rules:
            if rule.matches(path):
                return RobotsVerdict(
                    allowed=rule.allow, rule=rule.text, crawl_delay=delay, crawl_delay_asked=asked
                )
        return RobotsVerdict(allowed=True, crawl_delay=delay, crawl_delay_asked=asked)


ALLOW_ALL: Final = RobotsRules([])
"""The rules of a site whose robots.txt is missing (4xx) or names no group of ours."""

UNREACHABLE: Final = RobotsRules([], unreachable=True)
"""The rules of a site whose robots.txt could not be read: everything disallowed for now."""


# -- the parser -------------------------------------------------------------------------------


def check_product_token(agent: str) -> str:
    """``agent`` if it is a valid product token (RFC 9309 §2.2.1), else ``ValueError``."""
    if not _TOKEN.fullmatch(agent):
        raise ValueError(
            f"a robots.txt product token is letters, '-' and '_' only (RFC 9309 §2.2.1); "
            f"got {agent!r}: use the product name your User-Agent starts with, "
            f"such as {PRODUCT_TOKEN!r}"
        )
    return agent


def check_max_crawl_delay(value: float) -> float:
    """``value`` if it is a usable cap on ``Crawl-delay``, else ``ValueError``."""
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(
            f"max_crawl_delay must be a finite number of seconds >= 0 (got {value!r}); "
            f"{DEFAULT_MAX_CRAWL_DELAY:g} is the default"
        )
    return value


def _lines(body: bytes) -> list[bytes]:
    """The lines of the first :data:`MAX_ROBOTS_BYTES`; a line the limit cut is dropped.

    A cut ``Allow: /a/b`` would read as ``Allow: /a``, which allows more than the site said.
    """
    if len(body) > MAX_ROBOTS_BYTES:
        body = body[:MAX_ROBOTS_BYTES]
        end = max(body.rfind(b"\n"), body.rfind(b"\r"))
        body = body[: end + 1]
    for bom in _BOM_PREFIXES:  # a partial mark too, as Google's parser reads it
        if body.startswith(bom):
            body = body[len(bom) :]
            break
    return body.splitlines()


@dataclass(slots=True)
class _Groups:
    """The parse's state: the rules of the groups naming our token and of the ``*`` groups."""

    agent: str
    ours: list[_Rule] = field(default_factory=list)
    star: list[_Rule] = field(default_factory=list)
    ours_delays: list[float] = field(default_factory=list)
    star_delays: list[float] = field(default_factory=list)
    seen_ours: bool = False
    seen_star: bool = False
    in_ours: bool = False
    in_star: bool = False
    after_rule: bool = True
    """A rule line ended the current group's user-agent lines: the next one starts a group."""

    def user_agent(self, value: bytes) -> None:
        if self.after_rule:
            self.in_ours = self.in_star = self.after_rule = False
        if value[:1] == b"*" and not _AGENT.match(value, 1):  # "*bot" is no "*" group
            self.in_star = self.seen_star = True
        elif (token := _AGENT.match(value)) and token.group().decode().lower() == self.agent:
            self.in_ours = self.seen_ours = True

    def member(self) -> bool:
        """A group line (rule or delay) was read: whether it belongs to a group we keep."""
        self.after_rule = True
        return self.in_ours or self.in_star

    def add_rule(self, rule: _Rule) -> None:
        if self.in_ours:
            self.ours.append(rule)
        if self.in_star:
            self.star.append(rule)

    def add_delay(self, delay: float) -> None:
        if self.in_ours:
            self.ours_delays.append(delay)
        if self.in_star:
            self.star_delays.append(delay)


def _split(line: bytes) -> tuple[bytes, bytes] | None:
    """A line's key (lower case) and value, without comment and blanks; None if it has none.

    A line without a colon is read as a key and a value when it is exactly two words
    (``Disallow /x``): a colon that was forgotten, as Google reads it.
    """
    line = line.split(b"#", 1)[0]
    key, colon, value = line.partition(b":")
    if not colon:
        words = _BLANKS.split(line.strip(b" \t"))
        if len(words) != 2:
            return None
        key, value = words
    return key.strip(b" \t").lower(), value.strip(b" \t")


def _read_line(groups: _Groups, key: bytes, value: bytes) -> None:
    if key in _USER_AGENT_KEYS:
        groups.user_agent(value)
    elif key in _ALLOW_KEYS or key in _DISALLOW_KEYS:
        # An empty pattern is no rule (it matches nothing), but still a line of the group.
        if groups.member() and value:
            groups.add_rule(_rule(key in _ALLOW_KEYS, value))
    elif key in _DELAY_KEYS:
        delay = float(value) if _DELAY.fullmatch(value) else math.inf
        if groups.member() and math.isfinite(delay):
            groups.add_delay(delay)
    # Anything else (Sitemap, unknown records, garbage) is ignored and ends nothing.


def parse_robots(
    body: bytes,
    *,
    agent: str = PRODUCT_TOKEN,
    max_crawl_delay: float = DEFAULT_MAX_CRAWL_DELAY,
) -> RobotsRules:
    """Read a robots.txt body for the product token ``agent`` (RFC 9309 §2.2).

    The groups whose ``User-agent`` names ``agent`` (compared case-insensitively on the
    value's leading letters, ``-`` and ``_``, so ``Trio-Batch/1.0`` names it) are merged; if
    there is none, the ``*`` groups are; if there is none either, no rule applies. A group
    that names ``agent`` but holds no rule allows everything: the ``*`` group is a fallback,
    never added to a named one. ``Crawl-delay`` is the largest the chosen groups give.

    Only the first :data:`MAX_ROBOTS_BYTES` are read, a line cut by that limit is dropped,
    lines that are not ``key: value`` records (binary, NUL bytes, bad UTF-8) are skipped,
    and a body of any size costs time linear in that limit.

    Raises:
        ValueError: ``agent`` is not a product token, or ``max_crawl_delay`` is not a finite
            number >= 0.
    """
    groups = _Groups(check_product_token(agent).lower())
    check_max_crawl_delay(max_crawl_delay)
    for line in _lines(body):
        if (record := _split(line)) is not None:
            _read_line(groups, *record)
    if groups.seen_ours:
        rules, delays = groups.ours, groups.ours_delays
    elif groups.seen_star:
        rules, delays = groups.star, groups.star_delays
    else:
        return ALLOW_ALL
    return RobotsRules(
        rules,
        crawl_delay_asked=max(delays) if delays else None,
        max_crawl_delay=max_crawl_delay,
    )


def rules_for_status(
    status: int,
    body: bytes,
    *,
    agent: str = PRODUCT_TOKEN,
    max_crawl_delay: float = DEFAULT_MAX_CRAWL_DELAY,
) -> RobotsRules:
    """The rules of a robots.txt fetched with ``status`` (RFC 9309 §2.3.1).

    2xx: the body is parsed. 3xx (the fetcher followed the redirects it allows, at least five,
    and was sent on again, or sent round a loop): unavailable, so everything is allowed
    (§2.3.1.2 lets a crawler read it so, and Google does). 429: unreachable, as Google reads
    it (the site asks for fewer requests). Other 4xx: unavailable, everything allowed
    (§2.3.1.3). 5xx and anything else: unreachable, everything disallowed (§2.3.1.4).
    """
    if 200 <= status < 300:
        return parse_robots(body, agent=agent, max_crawl_delay=max_crawl_delay)
    if 300 <= status < 500 and status != 429:
        return ALLOW_ALL
    return UNREACHABLE


# -- the cache --------------------------------------------------------------------------------

RobotsGet = Callable[[str], Awaitable[tuple[int, bytes]]]
"""``await get(url) -> (status, body)``: fetch a robots.txt URL, redirects followed.

Past the redirects it follows (at least five, RFC 9309 §2.3.1.2), it answers the last 3xx
status (no body), which :func:`rules_for_status` reads as unavailable.

It reads at most :data:`MAX_ROBOTS_BYTES` (+1) of the body, and raises for a host it cannot
reach (connection refused, DNS, timeout, TLS): any exception but the cache's ``propagate``
ones makes the origin unreachable for :data:`UNREACHABLE_TTL`."""


def origin_of(url: str) -> tuple[tuple[str, str, int], str]:
    """The cache key of ``url``'s origin (scheme, host, port) and its robots.txt URL.

    Raises:
        ValueError: the URL is not http(s) or has no host.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            "robots.txt applies to http:// and https:// URLs with a host; "
            "check the URL before asking (the fetcher's precheck does)"
        )
    host = parts.hostname  # lower case, without brackets
    default = 80 if scheme == "http" else 443
    port = parts.port or default
    netloc = f"[{host}]" if ":" in host else host
    if port != default:
        netloc = f"{netloc}:{port}"
    return (scheme, host, port), f"{scheme}://{netloc}/robots.txt"


@final
@dataclass(frozen=True, slots=True)
class RobotsCacheStatistics:
    """What a :class:`RobotsCache` holds: for debugging, tests and metrics."""

    entries: int
    """Origins remembered (fresh, expired, or being fetched)."""
    fetching: int
    """Origins whose robots.txt is being fetched now."""
    fetches: int
    """robots.txt requests made since the cache was made."""


@dataclass(slots=True)
class _Entry:
    rules: RobotsRules | None = None
    expires: float = -math.inf
    fetching: trio.Event | None = None
    """Set while one task fetches this origin's file; the others wait for it."""
    unreachable_since: float | None = None
    """When the file was first found unreachable, with no good read since (None: readable)."""


@final
class RobotsCache:
    """robots.txt per origin, fetched once per TTL however many tasks ask at once.

    Args:
        get: fetches a robots.txt URL (:data:`RobotsGet`); the fetcher passes one that goes
            through its guard and the host's budget.
        agent: our product token (:data:`PRODUCT_TOKEN`).
        ttl: seconds a read file (2xx, or a 4xx's allow-all) is used; at most 24 h (RFC 9309
            §2.4).
        unreachable_ttl: seconds an unreachable answer is used (:data:`UNREACHABLE_TTL`).
        max_entries: origins remembered; the least recently asked is forgotten first.
        max_crawl_delay: the cap on ``Crawl-delay`` (:data:`DEFAULT_MAX_CRAWL_DELAY`).
        propagate: exception types from ``get`` that reach the caller of :meth:`check`
            instead of making the origin unreachable (nothing is cached for them): by default
            :class:`~trio_batch.RetryLater` (say, the fetch pool is full: try again, the site
            is not at fault).

    Raises:
        ValueError: a setting out of range; the message names it.
    """

    def __init__(
        self,
        get: RobotsGet,
        *,
        agent: str = PRODUCT_TOKEN,
        ttl: float = DEFAULT_TTL,
        unreachable_ttl: float = UNREACHABLE_TTL,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_crawl_delay: float = DEFAULT_MAX_CRAWL_DELAY,
        propagate: tuple[type[Exception], ...] = (RetryLater,),
    ) -> None:
        if not 0 < ttl <= DEFAULT_TTL:
            raise ValueError(
                f"RobotsCache ttl must be > 0 and at most {DEFAULT_TTL:g} s (24 h, RFC 9309 "
                f"§2.4) (got {ttl!r})"
            )
        if not 0 < unreachable_ttl <= ttl:
            raise ValueError(
                f"RobotsCache unreachable_ttl must be > 0 and at most ttl (got {unreachable_ttl!r})"
            )
        if max_entries < 1:
            raise ValueError(f"RobotsCache max_entries must be >= 1 (got {max_entries!r})")
        self._get = get
        self._agent = check_product_token(agent)
        self._max_crawl_delay = check_max_crawl_delay(max_crawl_delay)
        self._ttl = ttl
        self._unreachable_ttl = unreachable_ttl
        self._max_entries = max_entries
        self._propagate = propagate
        self._entries: OrderedDict[tuple[str, str, int], _Entry] = OrderedDict()
        self._fetches = 0

    def statistics(self) -> RobotsCacheStatistics:
        """What the cache holds now."""
        return RobotsCacheStatistics(
            entries=len(self._entries),
            fetching=sum(e.fetching is not None for e in self._entries.values()),
            fetches=self._fetches,
        )

    def check_nowait(self, url: str) -> RobotsVerdict:
        """The verdict on ``url`` from a fresh cached file, without fetching.

        For a step that must not wait (a redirect hop, checked while the fetch holds its pool
        slot): on ``WouldBlock``, give the slot back, :meth:`check`, and try again.

        Raises:
            trio.WouldBlock: the origin's file is not cached, or has expired.
            ValueError: the URL is not http(s) or has no host.
        """
        key, _ = origin_of(url)
        path = path_of(url)
        if path == "/robots.txt":
            return ALLOW_ALL.check_path(path)
        entry = self._entries.get(key)
        if entry is None or entry.rules is None or trio.current_time() >= entry.expires:
            raise trio.WouldBlock
        self._entries.move_to_end(key)
        return self._verdict(entry, path)

    async def check(self, url: str) -> RobotsVerdict:
        """The verdict on ``url``, fetching its origin's robots.txt if it is not cached.

        Concurrent calls for one origin make one request: the first caller fetches, the
        others wait for its answer. ``/robots.txt`` itself is always allowed. A file large
        enough to be slow (parsing past :data:`PARSE_IN_THREAD_BYTES`, checking past
        :data:`CHECK_IN_THREAD_STEPS`) is handled in a worker thread, so a hostile site does
        not stall the event loop.

        Raises:
            ValueError: the URL is not http(s) or has no host.
            Exception: one of ``propagate``'s types, as ``get`` raised it.

        Cancellation: a checkpoint. A cancelled call had no effect on the cache, except that
        a fetch it began is dropped (and the next caller fetches again); tasks waiting for
        that fetch carry on.
        """
        key, robots_url = origin_of(url)
        path = path_of(url)
        await trio.lowlevel.checkpoint()
        if path == "/robots.txt":
            return ALLOW_ALL.check_path(path)
        entry = await self._fresh(key, robots_url)
        rules = entry.rules
        if rules is not None and len(rules) * len(path) > CHECK_IN_THREAD_STEPS:
            return await trio.to_thread.run_sync(rules.check_path, path)
        return self._verdict(entry, path)

    @staticmethod
    def _verdict(entry: _Entry, path: str) -> RobotsVerdict:
        assert entry.rules is not None  # a fresh entry
        verdict = entry.rules.check_path(path)
        if entry.unreachable_since is None:
            return verdict
        return replace(verdict, unreachable_for=trio.current_time() - entry.unreachable_since)

    async def _fresh(self, key: tuple[str, str, int], robots_url: str) -> _Entry:
        """The origin's entry with fresh rules, fetched by this task or another one."""
        while True:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
                self._evict()
            else:
                self._entries.move_to_end(key)
            if entry.rules is not None and trio.current_time() < entry.expires:
                return entry
            if entry.fetching is None:
                await self._fetch(entry, robots_url)
                return entry
            await entry.fetching.wait()

    def _evict(self) -> None:
        """Forget the least recently asked origins past ``max_entries``.

        An origin being fetched is kept: forgetting it would let a second fetch start.
        """
        excess = len(self._entries) - self._max_entries
        if excess <= 0:
            return
        idle = [k for k, e in self._entries.items() if e.fetching is None][:excess]
        for stale in idle:
            del self._entries[stale]

    async def _fetch(self, entry: _Entry, robots_url: str) -> None:
        done = entry.fetching = trio.Event()
        try:
            rules = await self._load(robots_url)
            now = trio.current_time()
            if not rules.unreachable:
                entry.unreachable_since = None
            elif entry.unreachable_since is None:
                entry.unreachable_since = now
            ttl = self._unreachable_ttl if rules.unreachable else self._ttl
            entry.rules, entry.expires = rules, now + ttl
        finally:
            entry.fetching = None
            done.set()

    async def _load(self, robots_url: str) -> RobotsRules:
        self._fetches += 1
        try:
            status, body = await self._get(robots_url)
        except self._propagate:
            raise
        except Exception as exc:  # the host is unreachable, whatever the reason
            logger.debug("robots.txt unreachable: %s", type(exc).__name__)
            return UNREACHABLE
        if len(body) > PARSE_IN_THREAD_BYTES:
            rules = await trio.to_thread.run_sync(self._read, status, body)
        else:
            rules = self._read(status, body)
        logger.debug(
            "robots.txt read: status=%d bytes=%d rules=%d unreachable=%s",
            status,
            len(body),
            len(rules),
            rules.unreachable,
        )
        return rules

    def _read(self, status: int, body: bytes) -> RobotsRules:
        return rules_for_status(
            status, body, agent=self._agent, max_crawl_delay=self._max_crawl_delay
        )
