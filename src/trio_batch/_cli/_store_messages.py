"""Opening the command line's SQLite store, and one line for each way that can fail.

Every store-open problem becomes a :class:`UsageError` whose one line names the path and what
to do, in the words of the command line (``--db``), never of the Python API. What the file is
(no database, locked by a writer, and which one) the store says (``SQLiteStore``'s read-only
helpers); the words are the command line's.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator

from .._errors import StoreError
from ..stores import SQLiteStore
from ._output import UsageError


def store_open_message(db: str, exc: BaseException, *, flag: str = "--db") -> str | None:
    """A one-line message for an error opening the SQLite store ``db``, or None if not one.

    The messages name the path and what to do, with ``flag`` as the way to choose another file.
    """
    if os.path.isdir(db):
        return folder_message(db, flag)
    if isinstance(exc, OSError):
        return _os_message(db, exc, flag)

    if isinstance(exc, StoreError) and SQLiteStore.is_locked(db):
        holder = SQLiteStore.lock_holder(db)
        who = f"another process ({holder})" if holder else "another trio-batch process"
        return (
            f"{who} is writing {db}: stop it, or pass {flag} with another file "
            "(status, results and jobs can read it meanwhile)"
        )

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
