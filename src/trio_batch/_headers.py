"""Request headers a target may send, and where its credentials wait for its fetch (issue 26).

A target's ``Options.headers`` may hold ``Accept``, ``Accept-Language``, ``Authorization``,
``Cookie``, ``Referer`` and ``User-Agent`` (appended to the fetcher's own), names in any case.
:func:`header_refusal` is the submit-time check: cheap, bounded, and its messages name the
header, never quote its value.

``Cookie`` and ``Authorization`` are credentials. The HTTP API never lets their values reach
the store as they are: :meth:`HeaderSecrets.seal` swaps each for one of two things, and
:meth:`HeaderSecrets.unseal` swaps it back at fetch time. Answers show :data:`SECRET_MARK`.

- **With keys** (``serve --secrets-key-file``, :meth:`HeaderSecrets.keyed`): the value sealed
  with AES-SIV under the fleet's key (``trio_batch._sealing``), bound to the caller, the header
  and the target's URL. Any process with the key opens it: another instance of a fleet, or this
  one after a restart. A value sealed with a key this process lacks, or altered, fails its
  target 410 with a hint naming the fix; never a fetch without it.
- **Without keys**: a *reference* (``<secret 32 hex>``, an HMAC of the caller, the name and the
  value under a key that lives in this process only), the value kept in this process's memory.
  A reference no longer held (the process restarted and resumed the job, another instance of a
  fleet claimed it, or it was not used for ``keep`` seconds) fails its target 410 with a hint to
  submit again, and to give every instance of a fleet the same key file.

Either way the same value of the same caller (and URL) gives the same stored text, so a
repeated submit reuses its job (SPEC §3.1); another value gives another one, so two different
credentials never share a job.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, final

from ._errors import TargetError
from ._sealing import MAKE_KEY, SealingKeys, SealRefused, is_sealed

logger = logging.getLogger("trio_batch.headers")

ALLOWED_HEADERS: Final = (
    "Accept",
    "Accept-Language",
    "Authorization",
    "Cookie",
    "Referer",
    "User-Agent",
)
"""The headers a target may send, as they are stored (names are case-insensitive on input)."""
SECRET_HEADERS: Final = frozenset({"authorization", "cookie"})
"""Credentials (lower case): never stored, logged or echoed; sent to the target's origin only."""
MAX_HEADER_CHARS: Final = 4096
"""Longest value of one header."""
NOT_HELD: Final = "header of this target is no longer held by this server"
"""The end of the 410 message for a credential no process holds now (a door rewrites its hint:
the command line's own says to run the target again with its header)."""
SECRET_MARK: Final = "<secret>"
"""What answers show in place of a credential's value."""
ALLOWED_HINT: Final = (
    "a target may send Accept, Accept-Language, Authorization, Cookie, Referer and User-Agent "
    "(appended to ours), names in any case; leave the others out"
)

_CANONICAL: Final = {name.lower(): name for name in ALLOWED_HEADERS}
_REFERENCE = re.compile(r"<secret [0-9a-f]{32}>")
_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?")
"""A header value h11 sends: visible ASCII, inner spaces and tabs, no edge whitespace."""


def _shown(name: str) -> str:
    """A header name as a message may quote it: 64 characters at most, escaped if need be."""
    short = name if len(name) <= 64 else name[:64] + "..."
    return short if short.isprintable() else json.dumps(short)[1:-1]


def canonical_name(name: str) -> str | None:
    """The stored spelling of an allowed header (``accept-language`` -> ``Accept-Language``)."""
    return _CANONICAL.get(name.lower())


def header_refusal(headers: Mapping[str, object]) -> tuple[str, str, str] | None:
    """Why ``headers`` cannot be sent: ``(the header's name, message, hint)``; None if they can.

    Refuses more headers than there are allowed names, a name not allowed, a name given twice
    (in two cases), a value that is not a string, empty, longer than 4,096 characters, or not
    one line of visible ASCII (CR, LF, NUL and other controls; spaces at its ends). Bounded:
    at most six values of 4,096 characters are read. The message never quotes a value.
    """
    if len(headers) > len(ALLOWED_HEADERS):
        return (
            "headers",
            f"headers has {len(headers):,} headers; at most {len(ALLOWED_HEADERS)} can be sent",
            ALLOWED_HINT,
        )
    seen: set[str] = set()
    for name, value in headers.items():
        field = f"headers.{_shown(name)}"
        canonical = canonical_name(name)
        if canonical is None:
            return name, f"{field} is not a header a target may send", ALLOWED_HINT
        if canonical in seen:
            return name, f"{field} is given twice (names are case-insensitive)", "send it once"
        seen.add(canonical)
        problem = _value_problem(value)
        if problem is not None:
            return name, f"{field} {problem[0]}", problem[1]
    return None


def _value_problem(value: object) -> tuple[str, str] | None:
    one_line = "send one line of visible ASCII (percent-encode other characters), or leave it out"
    if not isinstance(value, str):
        return "must be a string", "send the header's value as a JSON string"
    if not value:
        return "is empty", "leave the header out, or give it a value"
    if len(value) > MAX_HEADER_CHARS:
        return (
            f"is {len(value):,} characters; the limit is {MAX_HEADER_CHARS:,}",
            "send a shorter value",
        )
    if _VALUE.fullmatch(value) is None:
        bad = next((i for i, c in enumerate(value) if not "\x20" <= c <= "\x7e" and c != "\t"), -1)
        if bad < 0:
            return "starts or ends with a space or a tab", "trim the value"
        what = "a line break" if value[bad] in "\r\n" else "a control or non-ASCII character"
        return f"holds {what} at character {bad + 1}", one_line
    return None


def check_headers(headers: Mapping[str, object]) -> None:
    """Refuse headers a target may not send (:func:`header_refusal`).

    Raises:
        TargetError: status 400, naming the header and the problem, with a hint.
    """
    refusal = header_refusal(headers)
    if refusal is not None:
        raise TargetError(refusal[1], hint=refusal[2], status=400)


def is_secret(name: str) -> bool:
    """Whether the header ``name`` (any case) is a credential."""
    return name.lower() in SECRET_HEADERS


def has_secrets(headers: Mapping[str, str]) -> bool:
    """Whether ``headers`` carry a credential (such a target bypasses the response cache)."""
    return any(is_secret(name) for name in headers)


def shown_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as answers show them: each credential's value is :data:`SECRET_MARK`."""
    return {name: SECRET_MARK if is_secret(name) else value for name, value in headers.items()}


@final
class HeaderMap(Mapping[str, str]):
    """A read-only, hashable mapping of header names to values, in the order given.

    ``Options.headers`` is one, so options stay immutable and can be hashed (the stores cache
    their JSON by options).
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items: dict[str, str] = dict(pairs)

    def __getitem__(self, name: str) -> str:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HeaderMap):  # Options.to_json compares every target's with the
            return self._items == other._items  # default: no dicts built for it
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"HeaderMap({shown_headers(self)!r})"  # a repr in a log never holds a credential


@dataclass(slots=True)
class _Held:
    caller: str
    value: str
    until: float


@final
class HeaderSecrets:
    """Credentials of submitted targets: sealed with keys, or held in this process's memory.

    Args:
        most: credentials held at once without keys; past it the least recently used goes
            (its target then fails with a hint to submit again).
        keep: seconds a credential is held, without keys, after it was last sealed or fetched
            with.
        clock: seconds, for ``keep`` (:func:`time.monotonic`).
        keys: seal into the store with these (``trio_batch._sealing``); None holds in memory.
    """

    def __init__(
        self,
        *,
        most: int = 10_000,
        keep: float = 6 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
        keys: SealingKeys | None = None,
    ) -> None:
        self._key = secrets.token_bytes(32)
        self._most = most
        self._keep = keep
        self._clock = clock
        self._keys = keys
        self._held: collections.OrderedDict[str, _Held] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    @contextlib.contextmanager
    def keyed(self, keys: SealingKeys | None) -> Iterator[None]:
        """Seal with ``keys`` (and open with them) during the block, as before it after.

        ``trio-batch serve --secrets-key-file`` runs in one; values sealed in it open later
        in any process with the same keys.
        """
        before, self._keys = self._keys, keys
        try:
            yield
        finally:
            self._keys = before

    def seal(self, caller: str, headers: Mapping[str, str], *, url: str) -> HeaderMap:
        """``headers`` with canonical names and each credential's value sealed for ``caller``'s
        target at ``url`` (what the HTTP API stores at submit): encrypted with the keys, or
        swapped for a reference to this process's memory without them."""
        self._expire()
        keys = self._keys
        sealed: dict[str, str] = {}
        for name, value in headers.items():
            canonical = canonical_name(name) or name
            if is_secret(canonical) and keys is not None:
                value = keys.seal(caller, url, canonical, value)
            elif is_secret(canonical):
                digest = hmac.new(
                    self._key, f"{caller}\x00{canonical}\x00{value}".encode(), hashlib.sha256
                ).hexdigest()[:32]
                value = self._hold(f"<secret {digest}>", _Held(caller, value, 0.0))
            sealed[canonical] = value
        return HeaderMap(sealed)

    def unseal(self, caller: str, headers: Mapping[str, str], *, url: str) -> HeaderMap:
        """``headers`` with each credential's sealed value or reference swapped back for the
        value (a value that is neither, from a library caller, is sent as it is).

        Raises:
            TargetError: status 410 with a hint naming the fix: a reference this process does
                not hold for ``caller``, or a sealed value that does not open here (no keys,
                not its key, or altered or moved to another caller, header or URL).
        """
        self._expire()
        out: dict[str, str] = {}
        for name, value in headers.items():
            if is_secret(name) and _REFERENCE.fullmatch(value):
                value = self._held_value(caller, name, value)
            elif is_secret(name) and is_sealed(value):
                value = self._opened(caller, url, name, value)
            out[name] = value
        return HeaderMap(out)

    def _held_value(self, caller: str, name: str, ref: str) -> str:
        held = self._held.get(ref)
        if held is None or held.caller != caller:
            raise TargetError(
                f"the {name} {NOT_HELD}",
                hint="the credentials of this target were held in the memory of the instance "
                "that admitted it (it restarted, or another instance took the job, or the job "
                "waited too long); submit the job again. A fleet sends them from any instance "
                "when every instance is started with the same --secrets-key-file "
                f"(`{MAKE_KEY}` writes one)",
                status=410,
            )
        self._hold(ref, held)
        return held.value

    def _opened(self, caller: str, url: str, name: str, sealed: str) -> str:
        keys = self._keys
        if keys is None:
            raise TargetError(
                f"the {name} header of this target was sealed with a secrets key, and this "
                "server has none",
                hint="start every instance with the same --secrets-key-file as the instance "
                "that admitted the job, or submit the job again",
                status=410,
            )
        try:
            return keys.open(caller, url, name, sealed)
        except SealRefused as refused:
            if refused.why == "unknown key":
                raise TargetError(
                    f"the {name} header of this target was sealed with a key that this "
                    "server's --secrets-key-file does not hold",
                    hint="give every instance the same key file, and keep a replaced key on a "
                    "later line until the jobs it sealed are gone; or submit the job again",
                    status=410,
                ) from None
            raise TargetError(
                f"the sealed {name} header of this target does not open: it was changed in "
                "the store, or sealed for another caller or URL",
                hint="submit the job again",
                status=410,
            ) from None

    def _hold(self, ref: str, held: _Held) -> str:
        held.until = self._clock() + self._keep
        self._held[ref] = held
        self._held.move_to_end(ref)
        while len(self._held) > self._most:
            self._held.popitem(last=False)
            logger.warning("a held credential was dropped: %d are held at most", self._most)
        return ref

    def _expire(self) -> None:
        now = self._clock()
        while self._held:
            ref, held = next(iter(self._held.items()))
            if held.until > now:
                return
            del self._held[ref]


SECRETS: Final = HeaderSecrets()
"""The process's credentials: the HTTP API seals into it, the web fetcher unseals from it."""
