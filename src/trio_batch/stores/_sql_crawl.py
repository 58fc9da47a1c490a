"""A crawl's bookkeeping in SQL, once for both SQL stores: keys seen, links admitted, the limit.

A crawl's job has a row in ``crawls`` (its spec, its limit, how many targets it admitted, how
many pages it stored done, what it skipped by reason) and every key it has seen in
``crawl_keys`` (a target's canonical URL, a page's final URL, its ``rel=canonical``), unique per
job: the visited set, in the store. Each function runs inside the transaction that stores a
crawl page's outcome, so what a page found is admitted with the page, exactly once whatever
the concurrency (the unique key decides), and a crash loses neither.

The SQL is written once with ``?`` placeholders; ``postgres`` turns them into psycopg's ``%s``
and picks the one spelling that differs (reading a JSON array).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._crawl import SKIP_REASONS, CrawlInfo, CrawlSpec, Found
from ._protocol import Outcome

CRAWL_TABLES = """
    CREATE TABLE crawls (
        job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
        spec TEXT NOT NULL,
        lim INTEGER NOT NULL,
        cap INTEGER NOT NULL,
        admitted INTEGER NOT NULL DEFAULT 0,
        done INTEGER NOT NULL DEFAULT 0,
        skipped_depth INTEGER NOT NULL DEFAULT 0,
        skipped_scope INTEGER NOT NULL DEFAULT 0,
        skipped_pattern INTEGER NOT NULL DEFAULT 0,
        skipped_robots INTEGER NOT NULL DEFAULT 0,
        skipped_trap INTEGER NOT NULL DEFAULT 0,
        skipped_limit INTEGER NOT NULL DEFAULT 0,
        skipped_duplicate INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE crawl_keys (
        job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        idx INTEGER NOT NULL,
        PRIMARY KEY (job_id, key)
    );
    ALTER TABLE targets ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE targets ADD COLUMN parent INTEGER NOT NULL DEFAULT -1
"""
"""The crawl's tables and target columns, the same DDL on SQLite and PostgreSQL."""

_SKIPPED = ", ".join(f"skipped_{r}" for r in SKIP_REASONS)


class CrawlSQL:
    """The crawl statements for one SQL dialect, on a DB-API connection of it."""

    def __init__(self, postgres: bool) -> None:
        self._pg = postgres

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._pg else sql

    def _run(self, conn: Any, sql: str, params: Sequence[object] = ()) -> Any:
        return conn.execute(self._q(sql), tuple(params))

    def _json_keys(self) -> str:
        """A ``FROM`` item reading the JSON array of strings in the next parameter as ``k``."""
        if self._pg:
            return "json_array_elements_text(?::json) WITH ORDINALITY AS e (k, n)"
        return "(SELECT value AS k, key AS n FROM json_each(?)) AS e"

    def seen_sql(self) -> str:
        """Whether one of a page's keys (a JSON array of strings) is another target's.

        By key, one index probe a key: on PostgreSQL the writer plans a statement once, maybe
        while the crawl is young; a semi-join read every key of the crawl for every page (hash
        or nested loop, 2.5-4.9 ms a page at 20,000 keys).
        """
        keys = f"SELECT e.k FROM {self._json_keys()}"
        keys = f"key = ANY(ARRAY({keys}))" if self._pg else f"key IN ({keys})"
        return self._q(f"SELECT 1 FROM crawl_keys WHERE job_id = ? AND {keys} AND idx <> ?")

    def admit(
        self,
        conn: Any,
        job_id: str,
        spec_json: str,
        seeds: Sequence[Found],
        skipped: Mapping[str, int],
    ) -> None:
        """A new crawl's row (with what was skipped of its seeds), and its seeds' keys (the
        seeds are targets 0, 1, ...)."""
        spec = CrawlSpec.from_json(spec_json)
        counts = [int(skipped.get(reason, 0)) for reason in SKIP_REASONS]
        self._run(
            conn,
            f"INSERT INTO crawls (job_id, spec, lim, cap, admitted, {_SKIPPED}) "
            f"VALUES (?, ?, ?, ?, ?, {', '.join('?' for _ in SKIP_REASONS)}) "
            "ON CONFLICT DO NOTHING",
            (job_id, spec_json, spec.limit, spec.frontier_cap, len(seeds), *counts),
        )
        conflict = "ON CONFLICT DO NOTHING"
        for idx, seed in enumerate(seeds):
            self._run(
                conn,
                f"INSERT INTO crawl_keys (job_id, key, idx) VALUES (?, ?, ?) {conflict}",
                (job_id, seed.key, idx),
            )
            self._run(
                conn,
                "UPDATE targets SET depth = ?, parent = ? WHERE job_id = ? AND idx = ?",
                (seed.depth, seed.parent, job_id, idx),
            )

    def is_crawl(self, conn: Any, job_id: str) -> bool:
        """Whether ``job_id`` is a crawl's job."""
        row = self._run(conn, "SELECT 1 FROM crawls WHERE job_id = ?", (job_id,)).fetchone()
        return row is not None

    def removed(self, conn: Any, job_id: str, idx: int, outcome: Outcome) -> bool:
        """Whether the page at ``idx`` leaves its job, counted skipped: dropped by the engine
        (``outcome.dropped``, its reason), or another target's (one of ``outcome.keys`` is:
        ``duplicate``). Else its keys join the visited set."""
        keys = outcome.keys
        if outcome.dropped:
            self._remove(conn, job_id, idx, outcome.dropped)
            return True
        if not keys:
            return False
        found = self._run(conn, self.seen_sql(), (job_id, json.dumps(list(keys)), idx)).fetchone()
        if found is None:
            for key in keys:
                self._run(
                    conn,
                    "INSERT INTO crawl_keys (job_id, key, idx) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (job_id, key, idx),
                )
            return False
        self._remove(conn, job_id, idx, "duplicate")
        return True

    def _remove(self, conn: Any, job_id: str, idx: int, reason: str) -> None:
        """Remove target ``idx`` from its job, counted skipped for ``reason``."""
        self._run(conn, "DELETE FROM targets WHERE job_id = ? AND idx = ?", (job_id, idx))
        self._run(conn, "UPDATE jobs SET targets_total = targets_total - 1 WHERE id = ?", (job_id,))
        self.count(conn, job_id, {reason: 1})

    def count(self, conn: Any, job_id: str, skipped: Mapping[str, int], done: int = 0) -> None:
        """Add to the crawl's skipped counts (by reason) and its pages done."""
        sets = [f"skipped_{r} = skipped_{r} + ?" for r in SKIP_REASONS if skipped.get(r)]
        params: list[object] = [int(skipped[r]) for r in SKIP_REASONS if skipped.get(r)]
        if done:
            sets.append("done = done + ?")
            params.append(done)
        if sets:
            sql = f"UPDATE crawls SET {', '.join(sets)} WHERE job_id = ?"
            self._run(conn, sql, (*params, job_id))

    def admit_found(self, conn: Any, job_id: str, options: str, found: Sequence[Found]) -> int:
        """Admit the page's links not seen yet, while the crawl's frontier has room, as new
        targets of its job (the next indices, in the order found); count the rest skipped
        (``duplicate``: seen; ``limit``: past the frontier's cap). Returns how many."""
        if not found:
            return 0
        conflict = "ON CONFLICT DO NOTHING RETURNING key"
        new = {
            str(r[0])
            for r in self._run(
                conn,
                f"INSERT INTO crawl_keys (job_id, key, idx) SELECT ?, e.k, -1 "
                f"FROM {self._json_keys()} WHERE true {conflict}",
                (job_id, json.dumps([f.key for f in found])),
            ).fetchall()
        }
        fresh = [f for f in found if f.key in new]
        admitted, cap = self._run(
            conn, "SELECT admitted, cap FROM crawls WHERE job_id = ?", (job_id,)
        ).fetchone()
        kept = fresh[: max(0, int(cap) - int(admitted))]
        self.count(
            conn, job_id, {"duplicate": len(found) - len(fresh), "limit": len(fresh) - len(kept)}
        )
        if not kept:
            return 0
        # The next index is how many targets the crawl ever had (a duplicate removed leaves a
        # hole; the job's total counts the targets it has now).
        base = int(admitted)
        self._run(
            conn,
            "UPDATE jobs SET targets_total = targets_total + ? WHERE id = ?",
            (len(kept), job_id),
        )
        self._run(
            conn, "UPDATE crawls SET admitted = admitted + ? WHERE job_id = ?", (len(kept), job_id)
        )
        rows = [(job_id, base + n, f.url, options, f.depth, f.parent) for n, f in enumerate(kept)]
        conn.cursor().executemany(
            self._q(
                "INSERT INTO targets (job_id, idx, url, options, status, depth, parent) "
                "VALUES (?, ?, ?, ?, 'pending', ?, ?)"
            ),
            rows,
        )
        conn.cursor().executemany(
            self._q("UPDATE crawl_keys SET idx = ? WHERE job_id = ? AND key = ?"),
            [(base + n, job_id, f.key) for n, f in enumerate(kept)],
        )
        return len(kept)

    def trim(self, conn: Any, job_id: str) -> None:
        """A crawl that stored its limit of pages starts nothing more: its pending targets are
        removed and counted skipped (``limit``)."""
        row = self._run(conn, "SELECT done, lim FROM crawls WHERE job_id = ?", (job_id,)).fetchone()
        if row is None or int(row[0]) < int(row[1]):
            return
        gone = self._run(
            conn,
            "DELETE FROM targets WHERE job_id = ? AND status = 'pending' RETURNING idx",
            (job_id,),
        ).fetchall()
        if gone:
            self._run(
                conn,
                "UPDATE jobs SET targets_total = targets_total - ? WHERE id = ?",
                (len(gone), job_id),
            )
            self.count(conn, job_id, {"limit": len(gone)})

    def frontier(
        self, conn: Any, job_id: str, after: int, limit: int
    ) -> list[tuple[int, str, str, int, int]]:
        """Up to ``limit`` pending targets of the crawl after ``after``: idx, url, options JSON,
        depth, parent."""
        rows = self._run(
            conn,
            "SELECT idx, url, options, depth, parent FROM targets WHERE job_id = ? AND idx > ? "
            "AND status = 'pending' ORDER BY idx LIMIT ?",
            (job_id, after, limit),
        ).fetchall()
        return [(int(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4])) for r in rows]

    def info(self, conn: Any, job_id: str) -> CrawlInfo | None:
        """The crawl's answer, or None for a batch or an unknown job."""
        row = self._run(
            conn, f"SELECT lim, spec, done, {_SKIPPED} FROM crawls WHERE job_id = ?", (job_id,)
        ).fetchone()
        if row is None:
            return None
        spec = CrawlSpec.from_json(str(row[1]))
        skipped = dict(zip(SKIP_REASONS, (int(n) for n in row[3:]), strict=True))
        return CrawlInfo(int(row[0]), spec.max_depth, int(row[2]), skipped)

    def done_of(self, conn: Any, job_id: str) -> int:
        """The crawl's pages stored done (what its limit counts)."""
        row = self._run(conn, "SELECT done FROM crawls WHERE job_id = ?", (job_id,)).fetchone()
        return 0 if row is None else int(row[0])
