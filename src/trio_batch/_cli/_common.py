"""What the commands share: exit codes, argument types, output lines, and opening a store.

Every store-open problem becomes a :class:`UsageError` whose one line names the path and what
to do, in the words of the command line (``--db``), never of the Python API.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

from .._errors import StoreError
from .._model import JSONValue, TargetStatus, target_json
from ..stores import SQLiteStore
from ..stores._sqlite._schema import NOT_A_DATABASE

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_DB = "trio-batch.sqlite"
DEFAULT_SERVER = "http://127.0.0.1:8080"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A problem with the command line, its input or its files; exit 2 with this message."""


# -- arguments ----------------------------------------------------------------------------------


def cidr(value: str) -> IPNetwork:
    """An ``--allow-net`` value: a network such as ``127.0.0.0/8`` or ``10.1.2.3``."""
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a network; write it as CIDR, e.g. 127.0.0.0/8 or 10.0.0.5/32"
        ) from None


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0 (got {value!r})")
    return number


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        choices=["auto", "rich", "plain", "off"],
        default="auto",
        help="progress on stderr: a live display on a terminal (auto), plain lines, or none",
    )


# -- output -------------------------------------------------------------------------------------


def target_line(idx: int, target: TargetStatus) -> dict[str, JSONValue]:
    """One target's JSON line for ``run`` and ``results``; ``idx`` is its place in the input."""
    return {**target_json(target), "idx": idx}


def dump_line(data: Mapping[str, JSONValue]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


_NON_PUBLIC = "non-public address"


def allow_net_hint(url: str, error: str, hint: str) -> str:
    """``hint``, or for a refused private address the ``--allow-net`` flag that would allow it.

    The web fetcher's hints speak to the Python API (``WebFetcher(allow=...)``); on the command
    line the remedy is a flag, and for a literal address we can name its network.
    """
    if _NON_PUBLIC not in error:
        return hint
    host = (urlsplit(url).hostname or "").strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if host == "localhost" or (address is not None and address.is_loopback):
        net = "127.0.0.0/8" if address is None or address.version == 4 else "::1/128"
        return (
            f"the address is on this machine; to fetch from it, pass --allow-net {net} "
            "(only for sites you trust)"
        )
    if address is not None and "redirect" not in error:
        net = f"{address}/{address.max_prefixlen}"
        return (
            f"only public addresses are fetched; to reach this one, pass --allow-net {net} "
            "(or its whole network, e.g. --allow-net 10.0.0.0/8)"
        )
    return (
        "only public addresses are fetched; to reach a private network you trust, pass "
        "--allow-net with its CIDR, e.g. --allow-net 10.0.0.0/8"
    )


# -- the store ----------------------------------------------------------------------------------


def lock_holder(db: str) -> str:
    """Who holds the write lock of the SQLite file ``db``: "pid N, name", or "" if unknown.

    Reads ``/proc/locks`` (Linux); elsewhere, or when it cannot tell, returns "".
    """
    try:
        inode = os.stat(db + "-lock").st_ino
        with open("/proc/locks", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[4] == str(os.getpid()):
            continue
        if fields[5].rsplit(":", 1)[-1] == str(inode):
            pid = fields[4]
            try:
                with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                    return f"pid {pid}, {f.read().strip()}"
            except OSError:
                return f"pid {pid}"
    return ""


def _is_locked(db: str) -> bool:
    try:
        import fcntl
    except ModuleNotFoundError:  # pragma: no cover - not on POSIX
        return False
    try:
        fd = os.open(db + "-lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def store_open_message(db: str, exc: BaseException, *, flag: str = "--db") -> str | None:
    """A one-line message for an error opening the SQLite store ``db``, or None if not one.

    The messages name the path and what to do, with ``flag`` as the way to choose another file.
    """
    if os.path.isdir(db):
        return folder_message(db, flag)
    if isinstance(exc, OSError):
        folder = os.path.dirname(os.path.abspath(db))
        if isinstance(exc, FileNotFoundError) and not os.path.isdir(folder):
            return (
                f"cannot open the database {db}: the folder {folder} does not exist; "
                f"create it (mkdir -p {folder}) or pass another {flag}"
            )
        if isinstance(exc, PermissionError):
            return (
                f"cannot open the database {db}: permission denied; pass {flag} with a file "
                "in a folder you can write"
            )
        return f"cannot open the database {db}: {exc.strerror or exc}; check {flag}"
    if isinstance(exc, StoreError) and _is_locked(db):
        holder = lock_holder(db)
        who = f"another process ({holder})" if holder else "another trio-batch process"
        return (
            f"{who} is writing {db}: stop it, or pass {flag} with another file "
            "(status, results and jobs can read it meanwhile)"
        )
    # SQLiteStore.open raises StoreError from SQLite's own error; its words speak to the API.
    cause = exc.__cause__
    if isinstance(exc, StoreError) and isinstance(cause, sqlite3.Error):
        if getattr(cause, "sqlite_errorname", "") in NOT_A_DATABASE:
            return f"{db} is not a trio-batch database ({cause}); pass another {flag}"
        return f"cannot open the database {db}: {cause}; check {flag}"
    return None


def folder_message(db: str, flag: str = "--db") -> str:
    """The one line for a ``--db`` that is a folder."""
    return f"cannot open the database {db}: it is a folder; pass {flag} with a file path"


@contextlib.asynccontextmanager
async def open_cli_store(db: str) -> AsyncIterator[SQLiteStore]:
    """The SQLite store ``db`` for writing.

    Raises:
        UsageError: it cannot be opened; the message names the path and what to do.
    """
    async with contextlib.AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(SQLiteStore.open(db))
        except (OSError, StoreError) as exc:
            raise UsageError(store_open_message(db, exc) or str(exc)) from None
        yield store
