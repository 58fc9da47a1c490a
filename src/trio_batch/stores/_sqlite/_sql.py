"""The SQL of every store operation, run in the writer thread (``snapshot`` and ``cache_get``
in a reader thread). Each function is one atomic step of the Store protocol."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..._errors import SubmitError
from ..._model import (
    LIVE_STATUSES,
    REUSABLE_STATUSES,
    Job,
    Snapshot,
    Submitted,
    TargetState,
)
from .._protocol import CacheEntry, FinishItem, Limits, NewJob, Outcome, Stored
from .._rules import (
    JOB_COLUMNS,
    LIVE_SQL,
    check_caps,
    job_from_row,
    options_json,
    target_from_row,
    terminal_status,
)


def admit(conn: sqlite3.Connection, job: NewJob, limits: Limits) -> Submitted | SubmitError:
    previous = conn.execute(
        "SELECT id, status, lease FROM jobs WHERE caller = ? AND key = ? "
        "ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (job.caller, job.key),
    ).fetchone()
    if (
        previous is not None
        and previous[1] in REUSABLE_STATUSES
        and previous[2] >= job.now - limits.ttl
    ):
        return Submitted(previous[0], True)
    caller_row = conn.execute(
        "SELECT live FROM counters WHERE caller = ?", (job.caller,)
    ).fetchone()
    total_row = conn.execute("SELECT live FROM counters WHERE caller = ''").fetchone()
    try:
        check_caps(len(job.targets), caller_row[0] if caller_row else 0, total_row[0], limits)
    except SubmitError as refused:  # returned, not raised: a refusal is no write error
        return refused
    conn.execute(
        "INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, created_at, "
        "updated_at, lease) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
        (
            job.id,
            job.caller,
            job.caller_class,
            job.key,
            len(job.targets),
            job.now,
            job.now,
            job.now,
        ),
    )
    conn.executemany(
        "INSERT INTO targets (job_id, idx, url, options, status) VALUES (?, ?, ?, ?, 'pending')",
        [(job.id, i, t.url, options_json(t.options)) for i, t in enumerate(job.targets)],
    )
    _add_live(conn, job.caller, 1)
    _sweep(conn, job.now - limits.ttl)
    return Submitted(job.id, False)


def _add_live(conn: sqlite3.Connection, caller: str, delta: int) -> None:
    conn.execute(
        "INSERT INTO counters (caller, live) VALUES (?, ?) "
        "ON CONFLICT (caller) DO UPDATE SET live = live + excluded.live",
        (caller, delta),
    )
    conn.execute("UPDATE counters SET live = live + ? WHERE caller = ''", (delta,))
    if delta < 0:
        conn.execute("DELETE FROM counters WHERE caller = ? AND live <= 0", (caller,))


def _end(
    conn: sqlite3.Connection, job_id: str, caller: str, status: str, now: float, error: str = ""
) -> None:
    conn.execute(
        "UPDATE jobs SET status = ?, error = ?, updated_at = ?, lease = ? WHERE id = ?",
        (status, error, now, now, job_id),
    )
    _add_live(conn, caller, -1)


def _delete_jobs(conn: sqlite3.Connection, rows: Sequence[tuple[str, int]]) -> None:
    conn.executemany("DELETE FROM targets WHERE job_id = ?", [(r[0],) for r in rows])
    conn.executemany("DELETE FROM jobs WHERE id = ?", [(r[0],) for r in rows])
    conn.execute(
        "UPDATE counters SET bytes = bytes - ? WHERE caller = ''", (sum(r[1] for r in rows),)
    )


def _sweep(conn: sqlite3.Connection, cutoff: float) -> None:
    rows = conn.execute(
        f"SELECT id, bytes FROM jobs WHERE status NOT IN {LIVE_SQL} AND lease < ?", (cutoff,)
    ).fetchall()
    if rows:
        _delete_jobs(conn, rows)


def _evict(conn: sqlite3.Connection, max_bytes: int, stored: int) -> int:
    evicted = 0
    while stored > max_bytes:
        row = conn.execute(
            f"SELECT id, bytes FROM jobs WHERE status NOT IN {LIVE_SQL} "
            "ORDER BY lease, rowid LIMIT 1"
        ).fetchone()
        if row is None:
            break
        _delete_jobs(conn, [row])
        stored -= row[1]
        evicted += 1
    return evicted


def start_target(conn: sqlite3.Connection, job_id: str, idx: int, now: float) -> bool:
    cur = conn.execute(
        f"UPDATE jobs SET status = 'running', updated_at = ? WHERE id = ? AND status IN {LIVE_SQL}",
        (now, job_id),
    )
    if cur.rowcount == 0:
        return False
    conn.execute(
        "UPDATE targets SET status = 'running' WHERE job_id = ? AND idx = ?", (job_id, idx)
    )
    return True


def release_target(conn: sqlite3.Connection, job_id: str, idx: int, now: float) -> None:
    cur = conn.execute(
        "UPDATE targets SET status = 'pending' WHERE job_id = ? AND idx = ? AND status = 'running'",
        (job_id, idx),
    )
    if cur.rowcount:
        conn.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (now, job_id))


def finish_target(
    conn: sqlite3.Connection, job_id: str, idx: int, result: Outcome, now: float, max_bytes: int
) -> Stored:
    cur = conn.execute(
        "UPDATE targets SET status = ?, result = ?, error = ?, hint = ? "
        "WHERE job_id = ? AND idx = ? AND status NOT IN ('done', 'failed')",
        (result.state.value, result.result_json, result.error, result.hint, job_id, idx),
    )
    if cur.rowcount == 0:
        return Stored(None)
    size = result.size
    caller, status, total, done = conn.execute(
        "UPDATE jobs SET targets_done = targets_done + 1, bytes = bytes + ?, updated_at = ? "
        "WHERE id = ? RETURNING caller, status, targets_total, targets_done",
        (size, now, job_id),
    ).fetchone()
    stored = conn.execute(
        "UPDATE counters SET bytes = bytes + ? WHERE caller = '' RETURNING bytes", (size,)
    ).fetchone()[0]
    terminal = None
    if status in LIVE_STATUSES and done == total:
        states = [
            TargetState(r[0])
            for r in conn.execute("SELECT DISTINCT status FROM targets WHERE job_id = ?", (job_id,))
        ]
        terminal = terminal_status(states)
        _end(conn, job_id, caller, terminal.value, now)
    return Stored(terminal, _evict(conn, max_bytes, stored))


def finish_targets(
    conn: sqlite3.Connection, items: Sequence[FinishItem], now: float, max_bytes: int
) -> list[Stored | Exception]:
    """:func:`finish_target` for each item, each in a savepoint so a failing one lands alone."""
    results: list[Stored | Exception] = []
    for job_id, idx, outcome in items:
        conn.execute("SAVEPOINT item")
        try:
            results.append(finish_target(conn, job_id, idx, outcome, now, max_bytes))
        except Exception as exc:
            conn.execute("ROLLBACK TO item")
            results.append(exc)
        conn.execute("RELEASE item")
    return results


def cancel(conn: sqlite3.Connection, job_id: str, now: float) -> Job | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None or row[2] not in LIVE_STATUSES:
        return None
    _end(conn, job_id, row[1], "cancelled", now)
    return job_from_row(row)


def live_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(f"SELECT id FROM jobs WHERE status IN {LIVE_SQL}")]


def interrupt(conn: sqlite3.Connection, job_ids: Sequence[str], now: float) -> list[str]:
    failed = []
    for job_id in job_ids:
        row = conn.execute("SELECT caller, status FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row[1] not in LIVE_STATUSES:
            continue
        conn.execute(
            "UPDATE targets SET status = 'pending' WHERE job_id = ? AND status = 'running'",
            (job_id,),
        )
        _end(conn, job_id, row[0], "failed", now, "interrupted")
        failed.append(job_id)
    return failed


def touch(conn: sqlite3.Connection, job_id: str, now: float) -> bool:
    return conn.execute("UPDATE jobs SET lease = ? WHERE id = ?", (now, job_id)).rowcount > 0


def snapshot(conn: sqlite3.Connection, job_id: str) -> Snapshot | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return None
    targets = [
        target_from_row(r)
        for r in conn.execute(
            "SELECT idx, url, status, result, error, hint, options FROM targets "
            "WHERE job_id = ? ORDER BY idx",
            (job_id,),
        )
    ]
    return Snapshot(job_from_row(row), targets)


_CACHE_COUNTER = "\x00web_cache"  # no caller name holds NUL, so this row is never a caller's


def cache_get(conn: sqlite3.Connection, key: str) -> CacheEntry | None:
    row = conn.execute(
        "SELECT body, meta, stored_at, expires_at FROM web_cache WHERE key = ?", (key,)
    ).fetchone()
    return None if row is None else CacheEntry(bytes(row[0]), row[1], row[2], row[3])


def cache_put(conn: sqlite3.Connection, key: str, entry: CacheEntry, max_bytes: int) -> None:
    old = conn.execute("SELECT bytes FROM web_cache WHERE key = ?", (key,)).fetchone()
    conn.execute(
        "INSERT OR REPLACE INTO web_cache (key, body, meta, stored_at, expires_at, bytes) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (key, entry.body, entry.meta_json, entry.stored_at, entry.expires_at, len(entry.body)),
    )
    delta = len(entry.body) - (old[0] if old else 0)
    conn.execute("UPDATE counters SET bytes = bytes + ? WHERE caller = ?", (delta, _CACHE_COUNTER))
    while True:
        total = conn.execute(
            "SELECT bytes FROM counters WHERE caller = ?", (_CACHE_COUNTER,)
        ).fetchone()[0]
        if total <= max_bytes:
            return
        oldest = conn.execute(
            "SELECT key, bytes FROM web_cache ORDER BY stored_at, rowid LIMIT 1"
        ).fetchone()
        if oldest is None:
            return
        conn.execute("DELETE FROM web_cache WHERE key = ?", (oldest[0],))
        conn.execute(
            "UPDATE counters SET bytes = bytes - ? WHERE caller = ?", (oldest[1], _CACHE_COUNTER)
        )
