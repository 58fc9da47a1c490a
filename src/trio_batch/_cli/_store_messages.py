"""Opening the command line's SQLite store, and one line for each way that can fail.

Every store-open problem becomes a :class:`UsageError` whose one line names the path and what
to do, in the words of the command line (``--db``), never of the Python API. What the file is
(no database, locked by a writer, and which one) the store says (``SQLiteStore``'s read-only
helpers); the words are the command line's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from typing import Final

from .._errors import StoreError
from ..stores import SQLiteStore
from ._output import UsageError


def store_open_message(
    db: str, exc: BaseException, *, flag: str = "--db", server_flag: bool = False
) -> str | None:
    """A one-line message for an error opening the SQLite store ``db``, or None if not one.

    The messages name the path and what to do, with ``flag`` as the way to choose another file.
    With ``server_flag`` (a command that takes ``--server``), a ``trio-batch serve`` holding
    the file is named with the ``--server`` URL that sends the work to it instead.
    """
    if os.path.isdir(db):
        return folder_message(db, flag)
    if isinstance(exc, OSError):
        return _os_message(db, exc, flag)

    if isinstance(exc, StoreError) and SQLiteStore.is_locked(db):
        return _locked_message(db, flag, server_flag=server_flag)

    # SQLiteStore.open raises StoreError from SQLite's own error; its words speak to the API.
    cause = exc.__cause__
    if isinstance(exc, StoreError) and isinstance(cause, sqlite3.Error):
        if SQLiteStore.is_not_a_database(cause):
            return f"{db} is not a trio-batch database ({cause}); pass another {flag}"
        return f"cannot open the database {db}: {cause}; check {flag}"
    return None


def _os_message(db: str, exc: OSError, flag: str) -> str:
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


def read_message(db: str, exc: StoreError) -> str:
    """The one line for a read-only view of ``db`` (``jobs``, ``timeline``) that failed."""
    cause = exc.__cause__ or exc
    if SQLiteStore.is_not_a_database(exc):
        return f"{db} is not a trio-batch database ({cause}); pass another --db"
    return f"cannot read {db}: {cause}; is it a trio-batch database?"


def folder_message(db: str, flag: str = "--db") -> str:
    """The one line for a ``--db`` that is a folder."""
    return f"cannot open the database {db}: it is a folder; pass {flag} with a file path"


@contextlib.asynccontextmanager
async def open_cli_store(db: str, *, server_flag: bool = False) -> AsyncIterator[SQLiteStore]:
    """The SQLite store ``db`` for writing; ``server_flag``: the command takes ``--server``.

    Raises:
        UsageError: it cannot be opened; the message names the path and what to do.
    """
    async with contextlib.AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(SQLiteStore.open(db))
        except (OSError, StoreError) as exc:
            message = store_open_message(db, exc, server_flag=server_flag)
            raise UsageError(message or str(exc)) from None
        yield store


# -- who writes the file ------------------------------------------------------------------------

_COMMANDS: Final = frozenset(
    {"serve", "run", "retry", "demo", "keys", "jobs", "status", "results", "timeline", "mcp"}
)
"""trio-batch's commands: the first of them in a process's arguments is the one it runs."""
_LISTEN: Final = "0A"  # a listening socket's state in /proc/net/tcp


def _locked_message(db: str, flag: str, *, server_flag: bool) -> str:
    """The one line for ``db`` held by another writer: who it is, and what to do instead.

    ``serve`` and ``run`` (and ``retry``) default to the same file, so the likeliest writer
    beside a ``run`` is the user's own server; then the remedy is not to stop it but to send the
    work to it (``--server``), and the line names its URL when ``/proc`` tells it.
    """
    holder = SQLiteStore.lock_holder(db)
    pid = holder.split(",")[0].removeprefix("pid ") if holder.startswith("pid ") else ""
    if pid and _runs_serve(pid):
        url = _listening_url(pid)
        who = f"trio-batch serve (pid {pid}{f', on {url}' if url else ''})"
        if server_flag:
            return (
                f"{who} is writing {db}: send this work to it with --server {url or 'URL'} "
                "and your API key in TRIO_BATCH_KEY (or --key), or pass "
                f"{flag} with another file for a store of your own"
            )
        return f"{who} is writing {db}: stop it, or pass {flag} with another file"
    who = f"another process ({holder})" if holder else "another trio-batch process"
    return (
        f"{who} is writing {db}: stop it, or pass {flag} with another file "
        "(status, results and jobs can read it meanwhile)"
    )


def _runs_serve(pid: str) -> bool:
    """Whether process ``pid`` is ``trio-batch serve`` (Linux: its ``/proc`` command line)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    command = next((arg for arg in argv[1:] if arg in _COMMANDS), None)
    return command == "serve"


def _listening_url(pid: str) -> str | None:
    """The ``http://HOST:PORT`` process ``pid`` listens on (Linux ``/proc``), or None.

    Its sockets are the ``socket:[INODE]`` links among its file descriptors; the TCP tables
    of its network namespace say which of them listens, on which address and port.
    """
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return None
    sockets = {link[8:-1] for link in links if link.startswith("socket:[")}
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}", encoding="ascii") as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) > 9 and row[3] == _LISTEN and row[9] in sockets:
                address, _, port = row[1].partition(":")
                return f"http://{_host(address)}:{int(port, 16)}"
    return None


def _host(hex_address: str) -> str:
    """A ``/proc/net/tcp`` address (32-bit words in host order) as a host to connect to."""
    raw = bytes.fromhex(hex_address)
    step = -1 if sys.byteorder == "little" else 1
    address = ipaddress.ip_address(b"".join(raw[i : i + 4][::step] for i in range(0, len(raw), 4)))
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "[::1]"
    return str(address) if address.version == 4 else f"[{address}]"
