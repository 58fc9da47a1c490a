"""The server's settings: one object read from a TOML file, ``TRIO_BATCH_*`` variables and flags.

Precedence, lowest first: built-in defaults, the config file, environment variables, command-line
flags. Every setting has the same name in all three places: ``max_bytes`` in the file,
``TRIO_BATCH_MAX_BYTES`` in the environment, ``--max-bytes`` on the command line. An invalid value
stops start-up with a :class:`SettingsError` that names the setting and where it came from.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import final

from .._config import Config, Hooks
from .._errors import Error

ENV_PREFIX = "TRIO_BATCH_"
_ENGINE = Config()
CONFIG_ENV = "TRIO_BATCH_CONFIG"


@final
class SettingsError(Error, ValueError):
    """A setting is invalid; the message names it, its source and what is allowed."""


@final
@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``trio-batch serve`` can be told. Build it with :func:`load_settings`."""

    host: str = "127.0.0.1"
    port: int = 8080
    db: str = "./trio-batch.sqlite"
    keys: str = "./trio-batch-keys.toml"
    workers: int = 2
    allow_net: tuple[str, ...] = ()
    targets_per_job: int = _ENGINE.targets_per_job
    jobs_per_caller: int = _ENGINE.jobs_per_caller
    jobs_total: int = _ENGINE.jobs_total
    ttl: float = _ENGINE.ttl
    max_bytes: int = _ENGINE.max_bytes
    retry_wait: float = _ENGINE.retry_wait
    retry_for: float = _ENGINE.retry_for
    fetch_slots: int = 0
    retry_after: int = 5
    graceful_timeout: float = 10.0
    log_level: str = "info"
    access_log: bool = True
    resume: bool = False
    store_timeout: float = 5.0
    pg_instance_timeout: float = 30.0
    pg_heartbeat: float = 0.0
    pg_pool_size: int = 4
    pg_statement_timeout: float = 0.0
    pg_call_timeout: float = 30.0
    pg_connect_timeout: float = 10.0
    pg_synchronous_commit: bool = True
    pg_schema: str = "trio_batch"
    shape_workers: int = 2
    shape_cpu_seconds: float = 10.0
    shape_memory: int = 2**30

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
            hooks=hooks if hooks is not None else Hooks(),
            resume=self.resume,
        )

    @property
    def effective_fetch_slots(self) -> int:
        """Fetches the web fetcher may run at once: ``fetch_slots``, or ``workers + 4``."""
        return self.fetch_slots or self.workers + 4


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    parse: Callable[[str, object], object]
    help: str
    metavar: str


def _int(lo: int, hi: int | None = None) -> Callable[[str, object], object]:
    def parse(name: str, raw: object) -> object:
        if isinstance(raw, bool):
            raise ValueError("must be a whole number")
        if isinstance(raw, str):
            try:
                raw = int(raw.strip())
            except ValueError:
                raise ValueError("must be a whole number") from None
        if not isinstance(raw, int):
            raise ValueError("must be a whole number")
        if raw < lo or (hi is not None and raw > hi):
            raise ValueError(f"must be between {lo} and {hi}" if hi else f"must be >= {lo}")
        return raw

    return parse


def _positive_float(name: str, raw: object) -> object:
    if isinstance(raw, bool):
        raise ValueError("must be a number > 0")
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            raise ValueError("must be a number > 0") from None
    if not isinstance(raw, (int, float)) or not raw > 0 or raw == float("inf"):
        raise ValueError("must be a number > 0")
    return float(raw)


def _seconds_or_zero(name: str, raw: object) -> object:
    if isinstance(raw, bool):
        raise ValueError("must be a number of seconds >= 0")
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            raise ValueError("must be a number of seconds >= 0") from None
    if not isinstance(raw, (int, float)) or not 0 <= raw < float("inf"):
        raise ValueError("must be a number of seconds >= 0")
    return float(raw)


_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")  # what PostgresStore.open(schema=) accepts


def _schema(name: str, raw: object) -> object:
    if not isinstance(raw, str) or not _SCHEMA.match(raw.strip()):
        raise ValueError(
            "must be a lower-case SQL identifier (letters, digits, underscores; at most 63)"
        )
    return raw.strip()


def _str(name: str, raw: object) -> object:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("must be a non-empty string")
    return raw.strip()


def _bool(name: str, raw: object) -> object:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
    raise ValueError("must be true or false")


def _level(name: str, raw: object) -> object:
    if not isinstance(raw, str) or raw.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError("must be one of debug, info, warning, error")
    return raw.lower()


def _networks(name: str, raw: object) -> object:
    if isinstance(raw, str):
        items: list[object] = [s for s in (p.strip() for p in raw.split(",")) if s]
    elif isinstance(raw, (list, tuple)):
        items = list(raw)
    else:
        raise ValueError("must be a list of networks in CIDR form, like 127.0.0.0/8")
    nets = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError("must be a list of networks in CIDR form, like 127.0.0.0/8")
        try:
            nets.append(str(ipaddress.ip_network(item.strip(), strict=False)))
        except ValueError:
            raise ValueError(
                f"{item!r} is not a network in CIDR form (like 127.0.0.0/8 or ::1/128)"
            ) from None
    return tuple(nets)


_D = Settings()
SPECS: tuple[_Spec, ...] = (
    _Spec("host", _str, f"address to listen on (default {_D.host})", "ADDR"),
    _Spec(
        "port",
        _int(0, 65535),
        f"port to listen on; 0 picks a free port, and the start-up log line says which "
        f"(default {_D.port})",
        "N",
    ),
    _Spec(
        "db",
        _str,
        f"where jobs are kept: a SQLite file path, or a postgresql:// DSN for a shared "
        f"PostgreSQL store (needs trio-batch[postgres]) (default {_D.db})",
        "PATH|DSN",
    ),
    _Spec(
        "keys",
        _str,
        f"the keys file of callers allowed in; add keys with `trio-batch keys add` "
        f"(default {_D.keys})",
        "FILE",
    ),
    _Spec("workers", _int(1, 256), f"worker tasks draining jobs (default {_D.workers})", "N"),
    _Spec(
        "allow_net",
        _networks,
        "a network (CIDR) the fetcher's guard lets through although it is private or loopback, "
        "for local use; repeat the flag for several; in the environment, comma-separated "
        "(default: none)",
        "CIDR",
    ),
    _Spec(
        "targets_per_job",
        _int(1),
        f"most targets in one batch (default {_D.targets_per_job})",
        "N",
    ),
    _Spec(
        "jobs_per_caller",
        _int(1),
        f"live (queued or running) jobs per caller; more is 429 (default {_D.jobs_per_caller})",
        "N",
    ),
    _Spec("jobs_total", _int(1), f"live jobs in all; more is 503 (default {_D.jobs_total})", "N"),
    _Spec(
        "ttl",
        _positive_float,
        f"seconds a finished job is kept after its owner last read it (default {_D.ttl:g})",
        "SECONDS",
    ),
    _Spec(
        "max_bytes",
        _int(1),
        f"stored result bytes before the oldest finished jobs are evicted (default {_D.max_bytes})",
        "BYTES",
    ),
    _Spec(
        "retry_wait",
        _positive_float,
        f"seconds before a busy target is tried again (default {_D.retry_wait:g})",
        "SECONDS",
    ),
    _Spec(
        "retry_for",
        _positive_float,
        f"seconds a target may keep coming back busy before it fails (default {_D.retry_for:g})",
        "SECONDS",
    ),
    _Spec(
        "fetch_slots",
        _int(0, 4096),
        "fetches that may run at once, batches and POST /v1/fetch together; 0 means "
        "workers + 4, so single fetches still get a slot while every worker fetches (default 0)",
        "N",
    ),
    _Spec(
        "retry_after",
        _int(1, 3600),
        f"the Retry-After seconds sent with 429 and 503 (default {_D.retry_after})",
        "SECONDS",
    ),
    _Spec(
        "graceful_timeout",
        _positive_float,
        f"seconds requests in flight get to finish at shutdown (default {_D.graceful_timeout:g})",
        "SECONDS",
    ),
    _Spec("log_level", _level, f"debug, info, warning or error (default {_D.log_level})", "LEVEL"),
    _Spec(
        "access_log",
        _bool,
        "log one line per request: method, route, status, duration, caller (default true)",
        "BOOL",
    ),
    _Spec(
        "resume",
        _bool,
        "at start, put the live jobs of a process that is gone back to work (a target that "
        "was running is fetched again) instead of failing them 'interrupted'; on PostgreSQL, "
        "also adopt the jobs of instances that stop later (default false)",
        "BOOL",
    ),
    _Spec(
        "store_timeout",
        _positive_float,
        f"seconds a request may wait for the database in all before it answers 503 with "
        f"Retry-After; also the deadline of /healthz's check of the database "
        f"(default {_D.store_timeout:g})",
        "SECONDS",
    ),
    _Spec(
        "pg_instance_timeout",
        _positive_float,
        f"PostgreSQL only: seconds without a heartbeat after which other instances fail this "
        f"instance's live jobs (default {_D.pg_instance_timeout:g})",
        "SECONDS",
    ),
    _Spec(
        "pg_heartbeat",
        _seconds_or_zero,
        "PostgreSQL only: seconds between heartbeats, less than pg_instance_timeout; "
        "0 means pg_instance_timeout / 3 (default 0)",
        "SECONDS",
    ),
    _Spec(
        "pg_pool_size",
        _int(2, 1024),
        f"PostgreSQL only: connections (and threads) this instance uses at most "
        f"(default {_D.pg_pool_size})",
        "N",
    ),
    _Spec(
        "pg_statement_timeout",
        _seconds_or_zero,
        "PostgreSQL only: the server cancels a statement of this instance that runs longer "
        "(statement_timeout); 0 leaves the server's setting (default 0)",
        "SECONDS",
    ),
    _Spec(
        "pg_call_timeout",
        _positive_float,
        f"PostgreSQL only: seconds any store call of this instance waits for the database's "
        f"answer; then the call fails and its query is cancelled on the server "
        f"(default {_D.pg_call_timeout:g})",
        "SECONDS",
    ),
    _Spec(
        "pg_connect_timeout",
        _positive_float,
        f"PostgreSQL only: seconds to wait for a connection, at start and for each reconnect "
        f"attempt (default {_D.pg_connect_timeout:g})",
        "SECONDS",
    ),
    _Spec(
        "pg_synchronous_commit",
        _bool,
        "PostgreSQL only: false sets synchronous_commit = off for this instance (a server "
        "crash may lose the last moments of writes, never corrupt them) (default true)",
        "BOOL",
    ),
    _Spec(
        "pg_schema",
        _schema,
        f"PostgreSQL only: the schema that holds the tables; deployments sharing a database "
        f"use different ones (default {_D.pg_schema})",
        "NAME",
    ),
    _Spec(
        "shape_workers",
        _int(1, 256),
        f"worker processes that shape responses (HTML to text, PDF, jq, grep, question), so "
        f"targets shaped at once (default {_D.shape_workers})",
        "N",
    ),
    _Spec(
        "shape_cpu_seconds",
        _positive_float,
        f"CPU seconds one target's shaping may take before its worker is killed and the "
        f"target fails (default {_D.shape_cpu_seconds:g})",
        "SECONDS",
    ),
    _Spec(
        "shape_memory",
        _int(256 * 2**20),
        f"bytes of address space per shaping worker, at least 268435456 (256 MiB) "
        f"(default {_D.shape_memory})",
        "BYTES",
    ),
)
_BY_NAME = {s.name: s for s in SPECS}
assert set(_BY_NAME) == {f.name for f in dataclasses.fields(Settings)}


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
        env = ENV_PREFIX + spec.name.upper()
        if spec.name == "allow_net":
            parser.add_argument(
                flag(spec.name),
                dest=spec.name,
                action="append",
                metavar=spec.metavar,
                default=None,
                help=f"{spec.help}; env {env}",
            )
        elif spec.parse is _bool:
            parser.add_argument(
                flag(spec.name),
                dest=spec.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{spec.help}; env {env}",
            )
        else:
            parser.add_argument(
                flag(spec.name),
                dest=spec.name,
                metavar=spec.metavar,
                default=None,
                help=f"{spec.help}; env {env}",
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

    Raises:
        SettingsError: a value is invalid, the config file cannot be read or has an unknown
            setting, or an unknown ``TRIO_BATCH_*`` variable is set.
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
    if settings.pg_heartbeat and not settings.pg_heartbeat < settings.pg_instance_timeout:
        raise SettingsError(
            f"setting pg_heartbeat ({sources['pg_heartbeat']}) must be less than "
            f"pg_instance_timeout ({settings.pg_instance_timeout:g}) "
            f"(got {settings.pg_heartbeat:g})"
        )
    try:
        settings.engine_config()
    except (TypeError, ValueError) as exc:  # pragma: no cover - the parsers are stricter
        raise SettingsError(str(exc)) from None
    return settings


def _as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _parse(name: str, raw: object, source: str) -> object:
    spec = _BY_NAME[name]
    if name == "allow_net" and isinstance(raw, list) and all(isinstance(r, str) for r in raw):
        raw = [part for item in raw for part in item.split(",") if part.strip()]
    try:
        return spec.parse(name, raw)
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
