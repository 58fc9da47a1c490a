"""The guard: which URLs and addresses the web fetcher may reach.

Two layers. :func:`precheck` looks at a URL's text alone (scheme, host, credentials, literal
addresses in every spelling a resolver accepts, length): the HTTP API runs it at submit and the
fetcher runs it again on every hop. At fetch time :func:`check_addresses` checks every address a
host name resolved to; the connection then goes to those checked addresses (see ``_net``).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

import httpx
import trio

from ..._errors import TargetError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
"""An IP network the guard lets through although it is not public (the ``allow`` settings):
``ipaddress.ip_network("10.1.0.0/16")``."""
Resolver: TypeAlias = Callable[[str, int], Awaitable[list[str]]]
"""An async DNS lookup: ``await resolver(host, port)`` -> the host's IP addresses as strings."""

_UNSAFE_CHARS = re.compile(r"[\s\x00-\x1f\x7f\\]")
"""Whitespace (Unicode's, as ``str.isspace`` has it), control characters and backslashes:
one search in C, where a generator over the characters cost the event loop 10 µs a check."""
MAX_URL_CHARS: Final = 2048
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMERIC_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

_PUBLIC_HINT = (
    "only public web addresses can be fetched; use the site's public host name, or ask the "
    "operator to allow this network"
)


@dataclass(frozen=True, slots=True)
class Checked:
    """A URL that passed :func:`precheck`: its parsed form, host, port and literal address."""

    url: httpx.URL
    host: str
    """The host as the connection pool sees it (ASCII, IDNA-encoded)."""
    port: int
    literal: IPAddress | None
    """The address when the host is an IP literal (in any spelling), else None."""

    @property
    def scope(self) -> str:
        """The key of the host's budget: the host and port the connection goes to.

        Every door keys its budget with this (the fetcher, the browser's proxy, the engine's
        rotation through ``WebFetcher.scope``), so their slots are the same slots.
        """
        return f"{self.host}:{self.port}"


def _refuse(msg: str, hint: str) -> TargetError:
    return TargetError(msg, hint=hint, status=400)


def parse_ipv4_spelling(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a resolver would read in ``host`` (decimal, octal, hex, short forms).

    ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` are all 127.0.0.1 to
    ``inet_aton`` and to browsers. Returns None for a host that is a name.

    Raises:
        TargetError: the host ends in a number but is not a valid address (status 400).
    """
    parts = host.split(".")
    if not _NUMERIC_PART.match(parts[-1]):
        return None
    if len(parts) > 4 or not all(_NUMERIC_PART.match(p) for p in parts):
        raise _refuse(
            "the URL's host looks like an IP address but is not a valid one",
            "write the host name, or a dotted IPv4 address such as 93.184.216.34",
        )
    values: list[int] = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            values.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part.startswith("0"):
            try:
                values.append(int(part, 8))
            except ValueError:
                values.append(-1)
        else:
            values.append(int(part))
    limits = [256] * (len(values) - 1) + [256 ** (5 - len(values))]
    if any(not 0 <= v < lim for v, lim in zip(values, limits, strict=True)):
        raise _refuse(
            "the URL's host looks like an IP address but is out of range",
            "write the host name, or a dotted IPv4 address such as 93.184.216.34",
        )
    number = 0
    for v in values[:-1]:
        number = number * 256 + v
    number = number * 256 ** (5 - len(values)) + values[-1]
    return ipaddress.IPv4Address(number)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address reaches: mapped, 6to4, NAT64, Teredo."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def is_public(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address (and so is every IPv4 address it embeds)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return False
        embedded = _embedded_ipv4(ip)
        if ip.ipv4_mapped is not None:
            return is_public(ip.ipv4_mapped)
        if embedded and not all(is_public(e) for e in embedded):
            return False
        if ip.is_site_local:
            return False
    return not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def is_allowed(ip: IPAddress, allow: Sequence[Network]) -> bool:
    """Whether the guard lets ``ip`` through: public, or inside one of the ``allow`` networks."""
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        candidates.append(ip.ipv4_mapped)
    if any(c in net for c in candidates for net in allow):
        return True
    return is_public(ip)


def parse_ip(text: str) -> IPAddress | None:
    """An IP address from a resolver's answer (a ``%zone`` suffix kept as the scope), or None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def precheck(url: str, *, allow: Sequence[Network] = ()) -> None:
    """Check a target URL before it is accepted: the submit-time guard of SPEC §5.

    Refuses a URL that is not http or https, has no host or an invalid one, carries credentials
    (``user@`` or ``user:password@``), names a literal private, loopback, link-local, reserved,
    multicast or unspecified address (in any spelling a resolver accepts: ``2130706433``,
    ``0x7f.1``, ``0177.0.0.1``, IPv4-mapped IPv6, trailing dots, ``localhost``), has a port out
    of range, or is longer than 2,048 characters. Addresses inside an ``allow`` network pass.

    Host names are not resolved here; the fetcher checks every resolved address at fetch time.

    Raises:
        trio_batch.TargetError: the URL is refused; ``status`` is 400, ``hint`` says how to fix it.
    """
    check_url(url, allow)


def check_url(url: str, allow: Sequence[Network]) -> Checked:
    """:func:`precheck`, returning the parsed URL (the fetcher's per-hop check)."""
    if not isinstance(url, str):
        raise _refuse("the URL must be a string", "send the URL as a JSON string")
    if len(url) > MAX_URL_CHARS:
        raise _refuse(
            f"the URL is {len(url):,} characters; the limit is {MAX_URL_CHARS:,}",
            "shorten the URL, for example by dropping tracking parameters",
        )
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(
            "the URL is not valid Unicode text (it has a lone surrogate)",
            "send the URL as UTF-8 text; percent-encode anything else",
        ) from None
    if _UNSAFE_CHARS.search(url):
        raise _refuse(
            "the URL contains whitespace, control characters or backslashes",
            "percent-encode those characters, or remove them",
        )
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in _DEFAULT_PORTS:
        raise _refuse(
            f"only http and https URLs can be fetched (got {scheme or 'no scheme'!r})"
            if scheme
            else "the URL has no scheme; only http and https URLs can be fetched",
            "write a full URL such as https://example.com/page",
        )
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise _refuse(
            f"the URL cannot be parsed: {exc}",
            "write a full URL such as https://example.com/page",
        ) from None
    if parsed.userinfo:
        raise _refuse(
            "the URL carries credentials (user@ or user:password@ before the host)",
            "remove the part before '@'; send credentials in options.headers "
            "(Authorization) instead, never in the URL",
        )
    try:
        host = parsed.raw_host.decode("ascii").lower()
    except UnicodeDecodeError:
        host = ""
    if not host:
        raise _refuse("the URL has no host", "write a full URL such as https://example.com/page")
    port = parsed.port if parsed.port is not None else _DEFAULT_PORTS[parsed.scheme]
    if not 0 < port < 65536:
        raise _refuse(f"the URL's port {port} is out of range", "use a port between 1 and 65535")
    literal = _literal_address(host)
    if literal is not None and not is_allowed(literal, allow):
        raise _refuse("the URL's host is a private or otherwise non-public address", _PUBLIC_HINT)
    return Checked(url=parsed, host=host, port=port, literal=literal)


def _literal_address(host: str) -> IPAddress | None:
    """The address a host spells literally (None for a name); refuses malformed hosts."""
    if ":" in host:
        if "%" in host:
            raise _refuse(
                "the URL's host is an IPv6 address with a zone, which is never public",
                _PUBLIC_HINT,
            )
        try:
            return ipaddress.IPv6Address(host.strip("[]"))
        except ValueError:
            raise _refuse(
                "the URL's host is not a valid IPv6 address",
                "write IPv6 hosts in brackets, such as http://[2001:db8::1]/",
            ) from None
    name = host[:-1] if host.endswith(".") else host
    if not name or "%" in name or len(name) > 253:
        raise _refuse(
            "the URL's host is not a valid host name",
            "write the host without percent-escapes, such as example.com",
        )
    ipv4 = parse_ipv4_spelling(name)
    if ipv4 is not None:
        return ipv4
    if not all(_LABEL.match(label) for label in name.split(".")):
        raise _refuse(
            "the URL's host is not a valid host name",
            "host names are letters, digits and hyphens separated by dots, such as example.com",
        )
    if name == "localhost" or name.endswith(".localhost"):
        return ipaddress.IPv4Address("127.0.0.1")
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    """The default resolver: the system's ``getaddrinfo`` through Trio, addresses in order."""
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    found: list[str] = []
    for *_, sockaddr in infos:
        ip = str(sockaddr[0])
        if ip not in found:
            found.append(ip)
    return found


def check_addresses(answers: Sequence[str], allow: Sequence[Network]) -> tuple[str, ...] | None:
    """The answers as checked address strings, or None if any of them is not allowed.

    Every address must pass: a host with one private answer among public ones is refused,
    so no later connection attempt can land on the private one.
    """
    checked: list[str] = []
    for answer in answers:
        ip = parse_ip(answer)
        if ip is None or not is_allowed(ip, allow):
            return None
        checked.append(str(ip))
    return tuple(checked)


async def resolve_checked(
    resolve: Resolver, host: str, port: int, allow: Sequence[Network]
) -> tuple[str, ...] | None:
    """Resolve ``host`` once and check every answer (:func:`check_addresses`).

    Returns the checked addresses; ``()`` when the name does not resolve; None when an answer
    is not allowed. The caller turns the last two into its own refusal.
    """
    try:
        answers = await resolve(host.removesuffix("."), port)
    except OSError:
        return ()
    return check_addresses(answers, allow) if answers else ()


_SECRET_KEY = re.compile(
    r"(?i)(token|secret|passw|pwd|signature|credential|session|apikey|api_key|auth|jwt|bearer)"
    r"|(?:^|[_.-])(key|sig|code|sid|access|pass)(?:$|[_.-])"
)
_TOKEN_VALUE = re.compile(r"^[A-Za-z0-9_\-.~+/=%]{20,}$")


def _looks_secret(key: str, value: str) -> bool:
    if _SECRET_KEY.search(key):
        return True
    return bool(
        _TOKEN_VALUE.match(value)
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    )


def redact_url(url: str) -> str:
    """``url`` without credentials and with token-like query values replaced by ``REDACTED``.

    Everything else stays as the server gave it, byte for byte: the query is not re-encoded
    (``?398``, ``;`` and ``%2F`` keep their spelling), so an unredacted URL is the URL itself.
    """
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    pieces = parts.query.split("&") if parts.query else []
    query = "&".join(_redact_piece(piece) for piece in pieces)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_piece(piece: str) -> str:
    raw_key, eq, raw_value = piece.partition("=")
    key = urllib.parse.unquote_plus(raw_key)
    value = urllib.parse.unquote_plus(raw_value)
    return f"{raw_key}=REDACTED" if eq and value and _looks_secret(key, value) else piece
