"""The engine's data: what callers submit, and what they read back.

Everything here is immutable and cheap to build. ``Options`` and ``Target`` are checked when they
are built, so a bad value fails at the caller's line, not later inside a worker.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeAlias, cast, final

from ._headers import HeaderMap

JSONValue: TypeAlias = (
    "Mapping[str, JSONValue] | Sequence[JSONValue] | str | int | float | bool | None"
)
"""A JSON value as written out; containers are read-only, so a ``list[str]`` is one too."""


@final
@dataclass(frozen=True, slots=True)
class Caller:
    """Who submitted a job. Only ``name`` takes part in caps and idempotency."""

    name: str
    workspace: str = ""
    key_sha256: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "\x00" in self.name:
            raise ValueError(
                f"Caller.name must be a non-empty string without NUL (got {self.name!r})"
            )
        for name in ("workspace", "key_sha256"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Caller.{name} must be a string")


@final
@dataclass(frozen=True, slots=True)
class Options:
    """Per-target options for the fetch function; the engine only stores and forwards them.

    ``context=None`` means the fetcher's default (on when there is a question); so does
    ``robots=None`` (the fetcher's ``robots`` setting: whether to obey the site's robots.txt).
    ``headers`` (names to values; any mapping, kept as a read-only :class:`HeaderMap`) are
    request headers for the fetcher; the web fetcher allows a few (``trio_batch._headers``).
    ``render`` asks the web fetcher to load the page in a headless browser and shape the DOM its
    scripts built; ``wait_for`` (a CSS selector, with ``render`` only) is what it waits for.
    ``formats`` (any sequence of strings, kept as a tuple) asks for several shapes of one body
    (``markdown``, ``text``, ``html``, ``raw``, ``links``, ``metadata``); ``mode`` is the
    one-format shorthand. Empty, it is left out of :meth:`to_json`, so older keys do not change.
    ``main_content`` (on by default) shapes an HTML page's main content, without its chrome,
    into text, Markdown and the ``html`` format; ``False`` shapes the whole page.
    ``max_age`` (whole seconds, or None for the fetcher's own cache life) is the oldest cached
    copy the target takes instead of a fetch: 0 never takes one, and the fetch's result still
    refreshes the cache for others (Firecrawl's ``maxAge``, in seconds as HTTP's are).
    """

    mode: str = ""
    question: str = ""
    pages: str = ""
    grep: str = ""
    jq: str = ""
    context: bool | None = None
    recover: bool = False
    robots: bool | None = None
    headers: Mapping[str, str] = HeaderMap()
    render: bool = False
    wait_for: str = ""
    formats: tuple[str, ...] = ()
    main_content: bool = True
    max_age: int | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "headers":
                ok = isinstance(value, Mapping) and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in value.items()
                )
                want = "a mapping of strings to strings"
                if ok and not isinstance(value, HeaderMap):
                    object.__setattr__(self, "headers", HeaderMap(value))
            elif f.name in ("context", "robots"):
                ok = value is None or isinstance(value, bool)
                want = "a bool or None"
            elif f.name == "formats":
                ok = isinstance(value, Sequence) and not isinstance(value, str | bytes)
                ok = ok and all(isinstance(v, str) for v in value)
                want = "a sequence of strings"
                if ok and not isinstance(value, tuple):
                    object.__setattr__(self, "formats", tuple(value))
            elif f.name in ("recover", "render", "main_content"):
                ok, want = isinstance(value, bool), "a bool"
            elif f.name == "max_age":
                ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
                want = "a whole number of seconds or None"
            else:
                ok, want = isinstance(value, str), "a string"
            if not ok:
                raise TypeError(f"Options.{f.name} must be {want} (got {type(value).__name__})")

    def to_json(self) -> dict[str, str | bool | int | dict[str, str] | list[str] | None]:
        """The options without their empty (default) fields, as stored and hashed."""
        if self is _NO_OPTIONS:  # most targets carry the one default instance: nothing to test
            return {}
        return {
            name: _json_value(value)
            for name, default in _OPTION_DEFAULTS
            if (value := getattr(self, name)) != default
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Options:
        """Rebuild options from :meth:`to_json` output.

        Raises:
            ValueError: a key that is not an option (the message names it).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r}; known options: {sorted(known)}")
        return cls(**data)


_OPTION_DEFAULTS = tuple((f.name, f.default) for f in dataclasses.fields(Options))
_NO_OPTIONS = Options()
"""Every target made without options holds this one instance (``Target.options``' default)."""


def _json_value(
    value: str | bool | int | HeaderMap | tuple[str, ...] | None,
) -> str | bool | int | dict[str, str] | list[str] | None:
    """An option's value as JSON holds it: ``headers`` an object, ``formats`` an array."""
    if isinstance(value, HeaderMap):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    return value


@final
@dataclass(frozen=True, slots=True)
class Target:
    """One unit of work: a URL and its options."""

    url: str
    options: Options = _NO_OPTIONS

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError("Target.url must be a non-empty string")
        if not isinstance(self.options, Options):
            raise TypeError(
                f"Target.options must be an Options (got {type(self.options).__name__})"
            )

    def to_json(self) -> dict[str, JSONValue]:
        return {"url": self.url, "options": self.options.to_json()}


@final
@dataclass(frozen=True, slots=True)
class Result:
    """A finished target's content; every other field of the fetcher's envelope is in ``meta``."""

    content: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Compact JSON of the result, as the store keeps it."""
        return json.dumps(
            {"content": self.content, "meta": self.meta},
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> Result:
        data = json.loads(text)
        return cls(content=data["content"], meta=data.get("meta") or {})


class JobStatus(enum.StrEnum):
    """A job's status. ``queued`` and ``running`` are *live*; the rest are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def live(self) -> bool:
        return self in (JobStatus.QUEUED, JobStatus.RUNNING)


class TargetState(enum.StrEnum):
    """A target's state. Targets a job never reached stay ``pending``."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


WebhookEvent = Literal["target", "end"]
"""What a webhook is told about: each target that ends, and the job's end."""
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = ("target", "end")


@final
@dataclass(frozen=True, slots=True)
class Webhook:
    """Where to tell a job's caller about its progress (SPEC §7); stored with the job.

    The engine only stores it; the service (``trio-batch serve``) delivers it, signed with the
    caller's secret. ``events`` is a non-empty subset of ``("target", "end")``.
    """

    url: str
    events: tuple[WebhookEvent, ...] = ("end",)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError("Webhook.url must be a non-empty string")
        events = tuple(self.events)
        if not events or any(e not in WEBHOOK_EVENTS for e in events):
            raise ValueError(
                f"Webhook.events must be a non-empty list of 'target' and 'end' (got {events!r})"
            )
        object.__setattr__(self, "events", tuple(e for e in WEBHOOK_EVENTS if e in events))

    def to_json(self) -> str:
        """Compact JSON, as the store keeps it."""
        return json.dumps({"url": self.url, "events": list(self.events)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Webhook | None:
        """The webhook stored as ``text``; None for the empty string (no webhook)."""
        if not text:
            return None
        data = json.loads(text)
        return cls(url=data["url"], events=tuple(data["events"]))


CallerClass = Literal["fleet", "restricted"]
"""A caller's class: ``fleet`` callers share the web cache; ``restricted`` ones do not."""
CALLER_CLASSES: tuple[CallerClass, ...] = ("fleet", "restricted")

LIVE_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)
REUSABLE_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.DONE, JobStatus.PARTIAL)


@final
@dataclass(frozen=True, slots=True)
class Job:
    """A job as the store holds it.

    ``created_at``, ``updated_at`` and ``lease`` are unix seconds from the engine's wall clock.
    ``lease`` is the last touch (submit, an owner's read, or reaching a terminal status); a
    finished job is kept until ``lease + Config.ttl``.
    """

    id: str
    caller: str
    status: JobStatus
    error: str
    targets_total: int
    targets_done: int
    created_at: float
    updated_at: float = 0.0
    lease: float = 0.0
    retry_of: str = ""
    """The job this one retries (``BatchEngine.retry``), or empty."""


@final
@dataclass(frozen=True, slots=True)
class TargetStatus:
    """One target of a job, in input order (``idx`` from 0)."""

    idx: int
    url: str
    status: TargetState
    result: Result | None
    error: str
    hint: str
    options: Options = Options()
    started_at: float | None = None
    """Unix seconds when the run that gave this target its state began (None while pending)."""
    finished_at: float | None = None
    """Unix seconds when its outcome was stored (None until it is done or failed)."""


def target_json(t: TargetStatus) -> dict[str, JSONValue]:
    """The wire form of one target, shared by the HTTP API and the CLI's JSON lines.

    Its keys are ``idx``, ``url``, ``status``, ``error``, ``hint`` and ``result`` (``null``, or
    ``{"content", "meta"}``); the HTTP API adds ``options``.
    """
    return {
        "idx": t.idx,
        "url": t.url,
        "status": t.status.value,
        "error": t.error,
        "hint": t.hint,
        "result": None
        if t.result is None
        else {"content": t.result.content, "meta": t.result.meta},
    }


class Submitted(NamedTuple):
    """What :meth:`BatchEngine.submit` returns: the job id, and whether it was reused."""

    id: str
    reused: bool


class Snapshot(NamedTuple):
    """A job and all its targets, read in one consistent view."""

    job: Job
    targets: list[TargetStatus]


def checked_submission(
    caller: object, caller_class: object, targets: object, webhook: object = None
) -> list[Target]:
    """The targets of a submit as a list, after checking the arguments' types.

    Raises:
        TypeError, ValueError: an argument is malformed; the message names it.
    """
    if not isinstance(caller, Caller):
        raise TypeError(f"caller must be a trio_batch.Caller (got {type(caller).__name__})")
    if caller_class not in CALLER_CLASSES:
        raise ValueError(f"caller_class must be 'fleet' or 'restricted' (got {caller_class!r})")
    if webhook is not None and not isinstance(webhook, Webhook):
        raise TypeError(f"webhook must be a trio_batch.Webhook (got {type(webhook).__name__})")
    if isinstance(targets, (str, bytes)):
        raise TypeError("targets must be a sequence of trio_batch.Target, not a string")
    checked: list[Target] = []
    for i, target in enumerate(cast("Sequence[object]", targets)):
        if not isinstance(target, Target):
            raise TypeError(
                f"targets[{i}] must be a trio_batch.Target (got {type(target).__name__})"
            )
        checked.append(target)
    return checked


def idempotency_key(
    caller: Caller, targets: list[Target], retry_of: str = "", concurrency: int = 1
) -> str:
    """Hex SHA-256 of the caller's name and the canonical JSON of the targets (SPEC §3.1).

    The job's ``concurrency`` is part of the request: a repeat asking for another is a new
    job, never a silent reuse (1, the default, adds nothing, so older keys stay the same).
    """
    canonical = json.dumps(
        [t.to_json() for t in targets], separators=(",", ":"), sort_keys=True, ensure_ascii=False
    )
    link = f"\x00retry\x00{retry_of}" if retry_of else ""  # a retry is its own request
    if concurrency != 1:
        link += f"\x00concurrency\x00{concurrency}"
    return hashlib.sha256(f"{caller.name}\x00{canonical}{link}".encode()).hexdigest()
