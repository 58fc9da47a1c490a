"""The server's settings: one object read from a TOML file, ``TRIO_BATCH_*`` variables and flags.

Precedence, lowest first: built-in defaults, the config file, environment variables, command-line
flags. Every setting has the same name in all three places: ``max_bytes`` in the file,
``TRIO_BATCH_MAX_BYTES`` in the environment, ``--max-bytes`` on the command line. An invalid value
stops start-up with a :class:`SettingsError` that names the setting and where it came from.

Each setting is one field of :class:`Settings`: its type and default, and in the field's
metadata its parser, help text and metavar, so a new setting is written in one place. The
settings belong to the command line (``trio-batch serve``); the library's ``create_app`` and
``serve`` take plain arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, final

from .._budget import HostBudget
from .._config import DEFAULT_CONCURRENCY, Config, Hooks
from .._errors import Error
from .._sealing import MAKE_KEY
from ._lists import networks, origins
from ._setting_values import (
    POSITIVE,
    SECONDS_OR_ZERO,
    Parse,
    boolean,
    level,
    schema,
    text,
    whole,
)

ENV_PREFIX = "TRIO_BATCH_"
_ENGINE = Config()
CONFIG_ENV = "TRIO_BATCH_CONFIG"


@final
class SettingsError(Error, ValueError):
    """A setting is invalid; the message names it, its source and what is allowed."""


_ABOUT = "trio_batch.setting"  # the key of a Settings field's metadata
_REPEATED = frozenset({"allow_net", "cors_origin"})
"""Settings whose flag may be given several times (in the environment: comma-separated)."""


@final
@dataclass(frozen=True, slots=True)
class _About:
    """What a :class:`Settings` field needs beyond its type and default: how its raw values
    are parsed, and its ``--help`` text (``{default}`` in it stands for the field's default)
    and metavar."""

    parse: Parse
    help: str
    metavar: str


def _about(parse: Parse, help: str, metavar: str) -> dict[str, _About]:
    return {_ABOUT: _About(parse, help, metavar)}


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``trio-batch serve`` can be told. Build it with :func:`load_settings`.

    Each field is one setting, and the field is its one source: its type and default here, its
    parser, help and metavar in the field's metadata (see :data:`SPECS`).
    """

    host: str = field(
        default="127.0.0.1",
        metadata=_about(text, "address to listen on (default {default})", "ADDR"),
    )
    port: int = field(
        default=8080,
        metadata=_about(
            whole(0, 65535),
            "port to listen on; 0 picks a free port, and the start-up log line says which "
            "(default {default})",
            "N",
        ),
    )
    db: str = field(
        default="./trio-batch.sqlite",
        metadata=_about(
            text,
            "where jobs are kept: a SQLite file path, or a postgresql:// DSN for a shared "
            "PostgreSQL store (needs trio-batch[postgres]) (default {default})",
            "PATH|DSN",
        ),
    )
    keys: str = field(
        default="./trio-batch-keys.toml",
        metadata=_about(
            text,
            "the keys file of callers allowed in; add keys with `trio-batch keys add` "
            "(default {default})",
            "FILE",
        ),
    )
    secrets_key_file: str = field(
        default="",
        metadata=_about(
            text,
            "a file of secret keys, the same file on every instance of a fleet (one key a "
            "line: the first seals, every one opens); with it a target's Cookie and "
            "Authorization are stored encrypted (AES-SIV), so any instance can send them, "
            f"also after a restart; `{MAKE_KEY}` writes one (default: none, they wait in "
            "the memory of the instance that admitted the job)",
            "FILE",
        ),
    )
    workers: int = field(
        default=2,
        metadata=_about(
            whole(1, 256),
            "worker tasks draining jobs, so fetches at once; raise it past 2 where the hosts' "
            "budgets allow: each host still gets at most --host-concurrency (default {default})",
            "N",
        ),
    )
    allow_net: tuple[str, ...] = field(
        default=(),
        metadata=_about(
            networks,
            "a network (CIDR) the fetcher's guard lets through although it is private or "
            "loopback, for local use; repeat the flag for several; in the environment, "
            "comma-separated (default: none)",
            "CIDR",
        ),
    )
    targets_per_job: int = field(
        default=_ENGINE.targets_per_job,
        metadata=_about(whole(1), "most targets in one batch (default {default})", "N"),
    )
    jobs_per_caller: int = field(
        default=_ENGINE.jobs_per_caller,
        metadata=_about(
            whole(1),
            "live (queued or running) jobs per caller; more is 429 (default {default})",
            "N",
        ),
    )
    jobs_total: int = field(
        default=_ENGINE.jobs_total,
        metadata=_about(whole(1), "live jobs in all; more is 503 (default {default})", "N"),
    )
    ttl: float = field(
        default=_ENGINE.ttl,
        metadata=_about(
            POSITIVE,
            "seconds a finished job is kept after its owner last read it (default {default})",
            "SECONDS",
        ),
    )
    max_bytes: int = field(
        default=_ENGINE.max_bytes,
        metadata=_about(
            whole(1),
            "stored result bytes before the oldest finished jobs are evicted (default {default})",
            "BYTES",
        ),
    )
    retry_wait: float = field(
        default=_ENGINE.retry_wait,
        metadata=_about(
            POSITIVE, "seconds before a busy target is tried again (default {default})", "SECONDS"
        ),
    )
    retry_for: float = field(
        default=_ENGINE.retry_for,
        metadata=_about(
            POSITIVE,
            "seconds a target may keep coming back busy before it fails (default {default})",
            "SECONDS",
        ),
    )
    fetch_slots: int = field(
        default=0,
        metadata=_about(
            whole(0, 4096),
            "fetches that may run at once, batches and POST /v1/fetch together; 0 means "
            "workers + 4, so single fetches still get a slot while every worker fetches "
            "(default {default})",
            "N",
        ),
    )
    retry_after: int = field(
        default=5,
        metadata=_about(
            whole(1, 3600),
            "the least Retry-After seconds sent with 429 and 503; a refused submit's is computed "
            "from the work ahead of it (default {default})",
            "SECONDS",
        ),
    )
    graceful_timeout: float = field(
        default=10.0,
        metadata=_about(
            POSITIVE,
            "seconds requests in flight get to finish at shutdown (default {default})",
            "SECONDS",
        ),
    )
    log_level: str = field(
        default="info",
        metadata=_about(level, "debug, info, warning or error (default {default})", "LEVEL"),
    )
    cors_origin: tuple[str, ...] = field(
        default=(),
        metadata=_about(
            origins,
            "an origin (scheme://host[:port]) whose browser pages may call the API and /mcp: "
            "its CORS preflights are answered and its answers carry "
            "Access-Control-Allow-Origin; repeat the flag for several; '*' is refused, as "
            "requests carry a key; in the environment, comma-separated (default: none)",
            "ORIGIN",
        ),
    )
    access_log: bool = field(
        default=True,
        metadata=_about(
            boolean,
            "log one line per request: method, route, status, duration, caller (default {default})",
            "BOOL",
        ),
    )
    resume: bool = field(
        default=False,
        metadata=_about(
            boolean,
            "at start, put the live jobs of a process that is gone back to work (a target that "
            "was running is fetched again) instead of failing them 'interrupted'; on "
            "PostgreSQL, also adopt the jobs of instances that stop later (default {default})",
            "BOOL",
        ),
    )
    store_timeout: float = field(
        default=5.0,
        metadata=_about(
            POSITIVE,
            "seconds a request may wait for the database in all before it answers 503 with "
            "Retry-After; also the deadline of /healthz's check of the database "
            "(default {default})",
            "SECONDS",
        ),
    )
    pg_instance_timeout: float = field(
        default=30.0,
        metadata=_about(
            POSITIVE,
            "PostgreSQL only: seconds without a heartbeat after which other instances fail "
            "this instance's live jobs (default {default})",
            "SECONDS",
        ),
    )
    pg_heartbeat: float = field(
        default=0.0,
        metadata=_about(
            SECONDS_OR_ZERO,
            "PostgreSQL only: seconds between heartbeats, less than pg_instance_timeout; "
            "0 means pg_instance_timeout / 3 (default {default})",
            "SECONDS",
        ),
    )
    pg_pool_size: int = field(
        default=4,
        metadata=_about(
            whole(2, 1024),
            "PostgreSQL only: connections (and threads) this instance uses at most "
            "(default {default})",
            "N",
        ),
    )
    pg_statement_timeout: float = field(
        default=0.0,
        metadata=_about(
            SECONDS_OR_ZERO,
            "PostgreSQL only: the server cancels a statement of this instance that runs "
            "longer (statement_timeout); 0 leaves the server's setting (default {default})",
            "SECONDS",
        ),
    )
    pg_call_timeout: float = field(
        default=30.0,
        metadata=_about(
            POSITIVE,
            "PostgreSQL only: seconds any store call of this instance waits for the "
            "database's answer; then the call fails and its query is cancelled on the server "
            "(default {default})",
            "SECONDS",
        ),
    )
    pg_claim_timeout: float = field(
        default=10.0,
        metadata=_about(
            POSITIVE,
            "PostgreSQL only: seconds a turn this instance claimed stays its own without a "
            "renewal; an instance killed mid-fetch holds its targets this long, then another "
            "instance fetches them again (default {default})",
            "SECONDS",
        ),
    )
    pg_connect_timeout: float = field(
        default=10.0,
        metadata=_about(
            POSITIVE,
            "PostgreSQL only: seconds to wait for a connection, at start and for each "
            "reconnect attempt (default {default})",
            "SECONDS",
        ),
    )
    pg_synchronous_commit: bool = field(
        default=True,
        metadata=_about(
            boolean,
            "PostgreSQL only: false sets synchronous_commit = off for this instance (a server "
            "crash may lose the last moments of writes, never corrupt them) "
            "(default {default})",
            "BOOL",
        ),
    )
    pg_schema: str = field(
        default="trio_batch",
        metadata=_about(
            schema,
            "PostgreSQL only: the schema that holds the tables; deployments sharing a "
            "database use different ones (default {default})",
            "NAME",
        ),
    )
    max_concurrency: int = field(
        default=_ENGINE.max_concurrency,
        metadata=_about(
            whole(1, 1024),
            "the most targets of one job a submit may ask to fetch at once (its concurrency; "
            "default {default})",
            "N",
        ),
    )
    max_crawl_pages: int = field(
        default=_ENGINE.max_crawl_pages,
        metadata=_about(
            whole(1, 10**9),
            "the most pages a crawl may ask to store (its limit; POST /v1/crawl, the MCP crawl "
            "tool) (default {default})",
            "N",
        ),
    )
    default_concurrency: int = field(
        default=DEFAULT_CONCURRENCY,
        metadata=_about(
            whole(1, 1024),
            "a job's concurrency when its submit does not say (the client, MCP and run "
            "--server leave it out): targets of the job fetched at once, each host still at "
            "most --host-concurrency; at most --max-concurrency (default {default})",
            "N",
        ),
    )
    host_concurrency: int = field(
        default=2,
        metadata=_about(
            whole(1, 1024),
            "requests to one host (and port) in flight at once, every caller and worker "
            "together (default {default})",
            "N",
        ),
    )
    host_interval: float = field(
        default=0.0,
        metadata=_about(
            SECONDS_OR_ZERO,
            "least seconds between two requests to one host; a longer robots.txt Crawl-delay "
            "wins (default {default})",
            "SECONDS",
        ),
    )
    robots: bool = field(
        default=False,
        metadata=_about(
            boolean,
            "obey each site's robots.txt (RFC 9309): a disallowed URL fails without a request, "
            "a Crawl-delay spaces the host's requests (up to 60 s) (default {default})",
            "BOOL",
        ),
    )
    host_block_limit: float = field(
        default=300.0,
        metadata=_about(
            POSITIVE,
            "seconds a host answering 429/503 may hold its targets back before they fail "
            "(default {default})",
            "SECONDS",
        ),
    )
    shape_workers: int = field(
        default=2,
        metadata=_about(
            whole(1, 256),
            "worker processes that shape responses (HTML to text, PDF, jq, grep, question), "
            "so targets shaped at once (default {default})",
            "N",
        ),
    )
    shape_cpu_seconds: float = field(
        default=10.0,
        metadata=_about(
            POSITIVE,
            "CPU seconds one target's shaping may take before its worker is killed and the "
            "target fails (default {default})",
            "SECONDS",
        ),
    )
    shape_memory: int = field(
        default=2**30,
        metadata=_about(
            whole(256 * 2**20),
            "bytes of address space per shaping worker, at least 268435456 (256 MiB) "
            "(default {default})",
            "BYTES",
        ),
    )

    render_workers: int = field(
        default=2,
        metadata=_about(
            whole(1, 64),
            "headless Chromium browsers for targets with render, each rendering one page at a "
            "time; none starts before the first render (default {default})",
            "N",
        ),
    )
    render_seconds: float = field(
        default=30.0,
        metadata=_about(
            POSITIVE,
            "seconds one render may take, from navigation to DOM, before its browser is killed "
            "and the target fails (default {default})",
            "SECONDS",
        ),
    )
    render_memory: int = field(
        default=2**30,
        metadata=_about(
            whole(256 * 2**20),
            "bytes one browser's processes may hold together before it is killed and the "
            "target fails, at least 268435456 (256 MiB) (default {default})",
            "BYTES",
        ),
    )

    def engine_config(self, *, hooks: Hooks | None = None) -> Config:
        """The engine's :class:`~trio_batch.Config` for these settings."""
        return Config(
            ttl=self.ttl,
            targets_per_job=self.targets_per_job,
            jobs_per_caller=self.jobs_per_caller,
            jobs_total=self.jobs_total,
            workers=self.workers,
            max_workers=max(self.workers, _ENGINE.max_workers),
            max_bytes=self.max_bytes,
            retry_wait=self.retry_wait,
            retry_for=self.retry_for,
            max_concurrency=self.max_concurrency,
            max_crawl_pages=self.max_crawl_pages,
            hooks=hooks if hooks is not None else Hooks(),
            resume=self.resume,
        )

    def host_budget(self) -> HostBudget:
        """The budget every request to one host shares (docs/politeness.md)."""
        return HostBudget(
            concurrency=self.host_concurrency,
            interval=self.host_interval,
            block_limit=self.host_block_limit,
        )

    @property
    def effective_fetch_slots(self) -> int:
        """Fetches the web fetcher may run at once: ``fetch_slots``, or ``workers + 4``."""
        return self.fetch_slots or self.workers + 4


@final
@dataclass(frozen=True, slots=True)
class Spec:
    """One setting as the flags and the parsers see it, read off its :class:`Settings` field."""

    name: str
    parse: Parse
    help: str
    metavar: str


def _shown(value: object, kind: object) -> str:
    """A default as ``--help`` shows it: ``true``/``false``, and seconds without a ``.0``."""
    if isinstance(value, bool):
        return str(value).lower()
    if kind == "float" and isinstance(value, int | float):
        return f"{value:g}"
    return str(value)


def _spec(f: dataclasses.Field[object]) -> Spec:
    about: _About = f.metadata[_ABOUT]
    return Spec(
        f.name, about.parse, about.help.format(default=_shown(f.default, f.type)), about.metavar
    )


SPECS: tuple[Spec, ...] = tuple(_spec(f) for f in dataclasses.fields(Settings))
"""Every setting, in the order of :class:`Settings`' fields (and of ``--help``)."""
_BY_NAME = {s.name: s for s in SPECS}


def flag(name: str) -> str:
    """The command-line flag of a setting: ``max_bytes`` -> ``--max-bytes``."""
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per setting; an absent flag leaves its setting alone."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"a TOML file of settings (names as below, with underscores: max_bytes = 1000); "
        f"also ${CONFIG_ENV}",
    )
    for spec in SPECS:
        how: dict[str, Any] = {"metavar": spec.metavar}  # a value after the flag
        if spec.name in _REPEATED:
            how["action"] = "append"
        elif spec.parse is boolean:
            how = {"action": argparse.BooleanOptionalAction}  # --flag and --no-flag
        env = ENV_PREFIX + spec.name.upper()
        parser.add_argument(
            flag(spec.name), dest=spec.name, default=None, help=f"{spec.help}; env {env}", **how
        )


def load_settings(
    flags: Mapping[str, object] | argparse.Namespace | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> Settings:
    """Build the settings from defaults, the config file, the environment and the flags.

    ``flags`` maps setting names to values given on the command line (``None`` = not given);
    an :class:`argparse.Namespace` from :func:`add_arguments` works as is. The config file is
    ``config_file``, else the ``config`` flag, else ``$TRIO_BATCH_CONFIG``, else none.

    A ``TRIO_BATCH_*`` variable that names no setting is skipped, not refused: other parts of
    trio-batch read variables of their own under the same prefix (``TRIO_BATCH_KEY`` for the
    ``--server`` commands, the test suite's ``TRIO_BATCH_TEST_PG``). A config file, which is
    only ever settings, has its unknown names refused.

    Raises:
        SettingsError: a value is invalid, or the config file cannot be read or has an
            unknown setting.
    """
    env = dict(os.environ if environ is None else environ)
    given = dict(vars(flags) if isinstance(flags, argparse.Namespace) else (flags or {}))
    path = config_file or _as_str(given.get("config")) or env.get(CONFIG_ENV) or None

    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    if path:
        for name, raw in _read_file(path).items():
            sources[name] = f"config file {path}"
            values[name] = _parse(name, raw, sources[name])

    for key, raw in env.items():
        if not key.startswith(ENV_PREFIX) or key == CONFIG_ENV:
            continue
        name = key[len(ENV_PREFIX) :].lower()
        if name not in _BY_NAME:
            # Other parts of trio-batch (tests, tools) read their own TRIO_BATCH_* variables.
            continue
        sources[name] = f"environment variable {key}"
        values[name] = _parse(name, raw, sources[name])

    for name, raw in given.items():
        if name in _BY_NAME and raw is not None:
            sources[name] = f"flag {flag(name)}"
            values[name] = _parse(name, raw, sources[name])

    settings = Settings(**values)  # type: ignore[arg-type]  # checked by each spec's parser
    _check_together(settings, sources)
    try:
        settings.engine_config()
    except (TypeError, ValueError) as exc:  # pragma: no cover - the parsers are stricter
        raise SettingsError(str(exc)) from None
    return settings


def _check_together(settings: Settings, sources: Mapping[str, str]) -> None:
    """Refuse settings that are each valid but not together, naming both and their sources.

    Raises:
        SettingsError: ``pg_heartbeat`` not under ``pg_instance_timeout``, or
            ``default_concurrency`` over ``max_concurrency``.
    """
    if settings.pg_heartbeat and not settings.pg_heartbeat < settings.pg_instance_timeout:
        raise SettingsError(
            f"setting pg_heartbeat ({sources['pg_heartbeat']}) must be less than "
            f"pg_instance_timeout ({settings.pg_instance_timeout:g}) "
            f"(got {settings.pg_heartbeat:g})"
        )
    if settings.default_concurrency > settings.max_concurrency:
        where = sources.get("default_concurrency", "its default")
        most = sources.get("max_concurrency", "its default")
        raise SettingsError(
            f"setting default_concurrency ({where}) must be at most max_concurrency "
            f"({settings.max_concurrency}, {most}) (got {settings.default_concurrency}); "
            "lower --default-concurrency or raise --max-concurrency"
        )


def _as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _parse(name: str, raw: object, source: str) -> object:
    spec = _BY_NAME[name]
    if name in _REPEATED and isinstance(raw, list) and all(isinstance(r, str) for r in raw):
        raw = [part for item in raw for part in item.split(",") if part.strip()]
    try:
        return spec.parse(raw)
    except ValueError as exc:
        raise SettingsError(f"setting {name} ({source}) {exc} (got {raw!r})") from None


def _read_file(path: str) -> dict[str, object]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {type(exc).__name__}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(_BY_NAME))
    if unknown:
        raise SettingsError(
            f"config file {path}: unknown setting {unknown[0]!r}; known settings: "
            f"{', '.join(sorted(_BY_NAME))}"
        )
    return data
