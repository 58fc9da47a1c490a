"""The SQL of every store operation, run in the writer thread (``snapshot`` and ``cache_get``
in a reader thread). Each function is one atomic step of the Store protocol."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from ..._errors import SubmitError
from ..._model import (
    LIVE_STATUSES,
    REUSABLE_STATUSES,
    Job,
    JobStatus,
    Snapshot,
    Submitted,
    TargetState,
)
from .._protocol import CacheEntry, FinishItem, Limits, NewJob, Outcome, ResumedJob, Stored
from .._rules import (
    CRAWL_WINDOW,
    JOB_COLUMNS,
    LIVE_SQL,
    PENDING_TARGETS_SQL,
    RESUME_JOB_COLUMNS,
    TARGET_COLUMNS,
    check_caps,
    job_from_row,
    options_json,
    resumed_job,
    target_from_row,
    terminal_status,
)
from .._sql_crawl import CrawlSQL


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
        "updated_at, lease, workspace, retry_of, webhook, hook_open, concurrency) "
        "VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            job.id,
            job.caller,
            job.caller_class,
            job.key,
            len(job.targets),
            job.now,
            job.now,
            job.now,
            job.workspace,
            job.retry_of,
            job.webhook,
            1 if job.webhook else 0,
            job.concurrency,
        ),
    )
    conn.executemany(
        "INSERT INTO targets (job_id, idx, url, options, status) VALUES (?, ?, ?, ?, 'pending')",
        [(job.id, i, t.url, options_json(t.options)) for i, t in enumerate(job.targets)],
    )
    if job.crawl:
        CRAWL.admit(conn, job.id, job.crawl, job.seeds, job.skipped)
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
    conn.executemany("DELETE FROM crawl_keys WHERE job_id = ?", [(r[0],) for r in rows])
    conn.executemany("DELETE FROM crawls WHERE job_id = ?", [(r[0],) for r in rows])
    conn.executemany("DELETE FROM jobs WHERE id = ?", [(r[0],) for r in rows])
    conn.execute(
        "UPDATE counters SET bytes = bytes - ? WHERE caller = ''", (sum(r[1] for r in rows),)
    )


def _sweep(conn: sqlite3.Connection, cutoff: float) -> None:
    rows = conn.execute(
        f"SELECT id, bytes FROM jobs WHERE status NOT IN {LIVE_SQL} AND lease < ? "
        "AND hook_open = 0",  # a webhook still to deliver keeps its job (stores/_outbox)
        (cutoff,),
    ).fetchall()
    if rows:
        _delete_jobs(conn, rows)


def _evict(conn: sqlite3.Connection, max_bytes: int, stored: int) -> int:
    evicted = 0
    while stored > max_bytes:
        row = conn.execute(
            f"SELECT id, bytes FROM jobs WHERE status NOT IN {LIVE_SQL} AND hook_open = 0 "
            "ORDER BY lease, rowid LIMIT 1"
        ).fetchone()
        if row is None:
            break
        _delete_jobs(conn, [row])
        stored -= row[1]
        evicted += 1
    return evicted


def start_targets(conn: sqlite3.Connection, marks: list[tuple[str, int, float]]) -> None:
    """Running marks ``(job_id, idx, now)``, in order: the target and its live job go running.

    A mark of a job that is no longer live, or of a target that has its outcome, writes nothing.
    Two statements, whatever the number.
    """
    conn.executemany(
        "UPDATE targets SET status = 'running', started_at = ?3 WHERE job_id = ?1 AND idx = ?2 "
        "AND status IN ('pending', 'running') "
        f"AND (SELECT status FROM jobs WHERE id = ?1) IN {LIVE_SQL}",
        marks,
    )
    conn.executemany(
        "UPDATE jobs SET status = 'running', updated_at = ?3 "
        f"WHERE id = ?1 AND status IN {LIVE_SQL}",
        marks,
    )


def release_target(conn: sqlite3.Connection, job_id: str, idx: int, now: float) -> None:
    cur = conn.execute(
        "UPDATE targets SET status = 'pending' WHERE job_id = ? AND idx = ? AND status = 'running'",
        (job_id, idx),
    )
    if cur.rowcount:
        conn.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (now, job_id))


# Store an outcome, unless the target already has one (a repeat is not counted twice) ...
# (the start is NULL but for a folded mark, whose start this write records)
_STORE = (
    "UPDATE targets SET status = ?, result = ?, error = ?, hint = ?, "
    "started_at = coalesce(?, started_at), finished_at = ? "
    "WHERE job_id = ? AND idx = ? AND status NOT IN ('done', 'failed')"
)
# ... with the start of its running mark, folded in (a mark leaves a stored outcome alone).
_STORE_MARKED = (
    "UPDATE targets SET status = ?, result = ?, error = ?, hint = ?, started_at = ?, "
    "finished_at = ? WHERE job_id = ? AND idx = ? AND status NOT IN ('done', 'failed')"
)
# The job's part of a running mark folded into an outcome that did not store (a repeat).
_MARK_JOB = (
    f"UPDATE jobs SET status = 'running', updated_at = ? WHERE id = ? AND status IN {LIVE_SQL}"
)
_COUNT = (
    "UPDATE jobs SET targets_done = targets_done + 1, bytes = bytes + ?, updated_at = ? "
    "WHERE id = ? RETURNING caller, status, targets_total, targets_done"
)
# The same, and running if it was queued: the job of a target whose running mark was folded in.
_COUNT_MARKED = (
    "UPDATE jobs SET targets_done = targets_done + 1, bytes = bytes + ?, updated_at = ?, "
    "status = iif(status = 'queued', 'running', status) "
    "WHERE id = ? RETURNING caller, status, targets_total, targets_done"
)


def finish_targets(
    conn: sqlite3.Connection,
    items: Sequence[FinishItem],
    now: float,
    max_bytes: int,
    marked: Mapping[tuple[str, int], float],
    isolate: bool,
) -> list[Stored | Exception]:
    """Store outcomes in order, each as ``Store.finish_target`` would; one result each.

    The usual group (distinct targets that all store, bytes under ``max_bytes``) takes a few
    statements whatever its size (:func:`_finish_group`). Anything else goes item by item: two
    statements per outcome (its target, its job), eviction as soon as the bytes pass
    ``max_bytes``. ``marked`` holds the targets whose running mark was folded into this write
    instead of written, with the mark's time (see ``_writer.Finish``). No savepoint: a
    savepoint makes SQLite copy every page it then touches into a statement journal. If
    anything raises, the writer rolls the transaction back and calls again with ``isolate``:
    then each outcome goes in a savepoint of its own, and a failing one gets its exception in
    its place while the others land.
    """
    stored = _stored_bytes(conn)
    if not isolate and len(items) > 1 and not any(o.crawl for _, _, o in items):
        sizes = [outcome.size for _, _, outcome in items]
        if stored + sum(sizes) <= max_bytes:  # else evictions may fall between items
            grouped = _finish_group(conn, items, sizes, now, marked)
            if grouped is not None:
                return grouped
    added = 0  # bytes stored that the counter does not hold yet
    results: list[Stored | Exception] = []
    unmarked = dict(marked)  # a mark is applied once: a repeat in the group comes after it
    for job_id, idx, result in items:
        if isolate:
            conn.execute("SAVEPOINT item")
        try:
            started = unmarked.pop((job_id, idx), None)
            if result.crawl:
                size, terminal, crawled = _finish_crawl_one(conn, job_id, idx, result, now, started)
            else:
                size, terminal = _finish_one(conn, job_id, idx, result, now, started)
                crawled = Stored(None)
            evicted = 0
            if size is not None:
                stored += size
                added += size
                if stored > max_bytes or isolate:
                    _add_bytes(conn, added)
                    added = 0
                if stored > max_bytes:
                    evicted = _evict(conn, max_bytes, stored)
                    stored = _stored_bytes(conn)
        except Exception as exc:
            if not isolate:
                raise
            conn.execute("ROLLBACK TO item")
            results.append(exc)
            added = 0
            stored = _stored_bytes(conn)
        else:
            results.append(Stored(terminal, evicted, crawled.found, crawled.removed))
        if isolate:
            conn.execute("RELEASE item")
    if added:
        _add_bytes(conn, added)
    return results


class _Replay(Exception):
    """A group met a case only the item-by-item path answers exactly: replay it that way."""


# One outcome's job, when the group's statements run as executemany (no RETURNING there).
_ADD = (
    "UPDATE jobs SET targets_done = targets_done + 1, bytes = bytes + ?, updated_at = ? "
    "WHERE id = ?"
)
_ADD_MARKED = (
    "UPDATE jobs SET targets_done = targets_done + 1, bytes = bytes + ?, updated_at = ?, "
    "status = iif(status = 'queued', 'running', status) WHERE id = ?"
)
_ENDING = (
    "SELECT id, caller FROM jobs WHERE id IN (SELECT value FROM json_each(?)) "
    f"AND status IN {LIVE_SQL} AND targets_done = targets_total"
)


def _finish_group(
    conn: sqlite3.Connection,
    items: Sequence[FinishItem],
    sizes: list[int],
    now: float,
    marked: Mapping[tuple[str, int], float],
) -> list[Stored | Exception] | None:
    """The common case in a few statements whatever the group's size: distinct targets that all
    store, no eviction. None if a target repeats (the item-by-item path takes it); if one does
    not store (already stored, or its job is gone), raises :class:`_Replay`."""
    keys = {(job_id, idx) for job_id, idx, _ in items}
    if len(keys) != len(items):
        return None
    get = marked.get
    stored = conn.executemany(
        _STORE,  # a folded mark leaves a stored outcome alone: the guard holds all the same
        [
            (o.state.value, o.result_json, o.error, o.hint, get((job_id, idx)), now, job_id, idx)
            for job_id, idx, o in items
        ],
    ).rowcount
    if stored != len(items):
        raise _Replay
    plain: list[tuple[int, float, str]] = []
    flipped: list[tuple[int, float, str]] = []
    for (job_id, idx, _), size in zip(items, sizes, strict=True):
        (flipped if (job_id, idx) in marked else plain).append((size, now, job_id))
    if flipped:
        conn.executemany(_ADD_MARKED, flipped)
    if plain:
        conn.executemany(_ADD, plain)
    _add_bytes(conn, sum(sizes))
    last = {job_id: n for n, (job_id, _, _) in enumerate(items)}
    results: list[Stored | Exception] = [_NOT_ENDED] * len(items)
    for job_id, caller in conn.execute(_ENDING, (json.dumps(list(last)),)).fetchall():
        results[last[job_id]] = Stored(_end_job(conn, job_id, caller, now))
    return results


_NOT_ENDED = Stored(None)
CRAWL = CrawlSQL(postgres=False)


def _end_job(conn: sqlite3.Connection, job_id: str, caller: str, now: float) -> JobStatus:
    """End a job whose every target has an outcome: done, failed or partial."""
    states = [
        TargetState(r[0])
        for r in conn.execute("SELECT DISTINCT status FROM targets WHERE job_id = ?", (job_id,))
    ]
    terminal = terminal_status(states)
    _end(conn, job_id, caller, terminal.value, now)
    return terminal


def _finish_one(
    conn: sqlite3.Connection,
    job_id: str,
    idx: int,
    result: Outcome,
    now: float,
    started: float | None,
) -> tuple[int | None, JobStatus | None]:
    """Store one outcome; return its bytes (None: not stored, it was a repeat or the job is
    gone) and the job's terminal status if it ended. ``started``: the time of a running mark
    folded into this write (None: no mark was)."""
    marked = started is not None
    if not conn.execute(
        _STORE_MARKED if marked else _STORE,  # with None, _STORE keeps the start it has
        (
            result.state.value,
            result.result_json,
            result.error,
            result.hint,
            started,
            now,
            job_id,
            idx,
        ),
    ).rowcount:
        if marked:  # a repeat: the folded mark still does its job's part, as start_targets
            conn.execute(_MARK_JOB, (started, job_id))
        return None, None
    size = result.size
    caller, status, total, done = conn.execute(
        _COUNT_MARKED if marked else _COUNT, (size, now, job_id)
    ).fetchone()
    if status not in LIVE_STATUSES or done != total:
        return size, None
    return size, _end_job(conn, job_id, caller, now)


def _finish_crawl_one(
    conn: sqlite3.Connection,
    job_id: str,
    idx: int,
    result: Outcome,
    now: float,
    started: float | None,
) -> tuple[int | None, JobStatus | None, Stored]:
    """Store a crawl page's outcome with the crawl's books (``stores/_sql_crawl``): a page that
    is another's (or dropped) is removed; else what it found is admitted first (its job's total
    grows before the job could end), then it is stored, counted, and a crawl at its limit
    stops."""
    row = conn.execute(
        "SELECT status, options FROM targets WHERE job_id = ? AND idx = ?", (job_id, idx)
    ).fetchone()
    if row is None or row[0] in ("done", "failed"):
        return None, None, Stored(None)
    if CRAWL.removed(conn, job_id, idx, result):
        return None, _end_if_complete(conn, job_id, now), Stored(None, removed=True)
    CRAWL.count(conn, job_id, result.skipped)
    found = CRAWL.admit_found(conn, job_id, str(row[1]), result.found)
    size, terminal = _finish_one(conn, job_id, idx, result, now, started)
    if result.state is TargetState.DONE:
        CRAWL.count(conn, job_id, {}, done=1)
    CRAWL.trim(conn, job_id)
    if terminal is None:
        terminal = _end_if_complete(conn, job_id, now)
    return size, terminal, Stored(None, found=found)


def _end_if_complete(conn: sqlite3.Connection, job_id: str, now: float) -> JobStatus | None:
    """End a live job whose every target now has an outcome (a crawl whose last targets were
    removed); its status, or None."""
    row = conn.execute(
        f"SELECT caller FROM jobs WHERE id = ? AND status IN {LIVE_SQL} "
        "AND targets_done >= targets_total",
        (job_id,),
    ).fetchone()
    return None if row is None else _end_job(conn, job_id, row[0], now)


def _stored_bytes(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT bytes FROM counters WHERE caller = ''").fetchone()[0])


def _add_bytes(conn: sqlite3.Connection, delta: int) -> None:
    conn.execute("UPDATE counters SET bytes = bytes + ? WHERE caller = ''", (delta,))


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


def resume(conn: sqlite3.Connection, now: float) -> list[ResumedJob]:
    """Every live job, oldest first, with its running targets pending again (``Store.resume``)."""
    jobs = conn.execute(
        f"SELECT {RESUME_JOB_COLUMNS} FROM jobs WHERE status IN {LIVE_SQL} "
        "ORDER BY created_at, rowid"
    ).fetchall()
    resumed = []
    for row in jobs:
        conn.execute(
            "UPDATE targets SET status = 'pending', started_at = NULL "
            "WHERE job_id = ? AND status = 'running'",
            (row[0],),
        )
        crawl = conn.execute("SELECT spec, done FROM crawls WHERE job_id = ?", (row[0],)).fetchone()
        window = CRAWL_WINDOW if crawl else -1  # -1: no limit (a batch's are few)
        targets = conn.execute(PENDING_TARGETS_SQL, (row[0], window)).fetchall()
        conn.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (now, row[0]))
        resumed.append(resumed_job(row, targets, None if crawl is None else (crawl[0], crawl[1])))
    return resumed


def touch(conn: sqlite3.Connection, job_id: str, now: float) -> bool:
    return conn.execute("UPDATE jobs SET lease = ? WHERE id = ?", (now, job_id)).rowcount > 0


def snapshot(conn: sqlite3.Connection, job_id: str) -> Snapshot | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return None
    targets = [
        target_from_row(r)
        for r in conn.execute(
            f"SELECT {TARGET_COLUMNS} FROM targets WHERE job_id = ? ORDER BY idx",
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
