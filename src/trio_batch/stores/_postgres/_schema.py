"""The database's shape: tables, the ``admit_job`` function, migrations and advisory locks.

Kept apart from the queries so that a schema change reads as one diff, and so that the version
a database is at, and the code that moves it on, sit together. Every instance may open a new
database at the same moment; :func:`migrate` runs all missing steps in one transaction behind an
advisory lock, so they migrate one after the other and the second finds nothing to do.

Advisory locks are transaction-scoped (``pg_advisory_xact_lock``) and keyed by two numbers: the
lock space of the schema (:func:`lock_space`), so two schemas in one database never contend,
and one of the ``LOCK_*`` keys below.
"""

from __future__ import annotations

import re
import zlib

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from ..._errors import StoreError
from .._rules import LIVE_SQL
from .._sql_crawl import CRAWL_TABLES
from ._scopes import held, lock_key, room

Conn = psycopg.Connection[TupleRow]
Cursor = psycopg.Cursor[TupleRow]

SCHEMA_VERSION = 14

SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
"""What ``PostgresStore.open(schema=...)`` accepts: a plain, unquoted SQL identifier."""

# The second key of the advisory locks; the first is the schema's lock space.
LOCK_MIGRATE = 0
LOCK_ADMIT = 1
LOCK_EVICT = 2
LOCK_CACHE = 3
LOCK_CLAIM = 4

# Admission in one round trip: reuse, caps, insert and sweep in one function call (migration 3;
# migration 7 adds the SPEC §7 columns to it).
_ADMIT_JOB = f"""
    CREATE FUNCTION admit_job(
        p_lock integer, p_id text, p_caller text, p_class text, p_key text,
        p_now double precision, p_ttl double precision, p_instance text,
        p_urls text[], p_opts text[],
        p_targets_per_job bigint, p_jobs_per_caller bigint, p_jobs_total bigint,
        OUT reused text, OUT caller_live bigint, OUT total_live bigint, OUT admitted boolean
    ) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    DECLARE
        prev record;
        gone bigint;
        freed bigint;
    BEGIN
        admitted := false;
        caller_live := 0;
        total_live := 0;
        -- Serialises admissions across instances until the transaction ends. In READ
        -- COMMITTED each statement below takes a new snapshot, so it sees every admission
        -- committed before the lock was granted.
        PERFORM pg_advisory_xact_lock(p_lock, {LOCK_ADMIT});
        SELECT id, status, lease INTO prev FROM jobs
        WHERE caller = p_caller AND key = p_key
        ORDER BY created_at DESC, seq DESC LIMIT 1;
        IF FOUND AND prev.status IN ('queued', 'running', 'done', 'partial')
                AND prev.lease >= p_now - p_ttl THEN
            reused := prev.id;
            RETURN;
        END IF;
        SELECT count(*) FILTER (WHERE caller = p_caller), count(*)
        INTO caller_live, total_live
        FROM jobs WHERE status IN {LIVE_SQL};
        IF cardinality(p_urls) > p_targets_per_job OR caller_live >= p_jobs_per_caller
                OR total_live >= p_jobs_total THEN
            RETURN;  -- refused: the caller raises the first cap broken (check_caps)
        END IF;
        INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, created_at,
            updated_at, lease, instance)
        VALUES (p_id, p_caller, p_class, p_key, 'queued', cardinality(p_urls), p_now, p_now,
            p_now, p_instance);
        INSERT INTO targets (job_id, idx, url, options, status)
        SELECT p_id, t.i - 1, t.u, t.o, 'pending'
        FROM unnest(p_urls, p_opts) WITH ORDINALITY AS t (u, o, i);
        WITH g AS (
            DELETE FROM jobs WHERE status NOT IN {LIVE_SQL} AND lease < p_now - p_ttl
            RETURNING bytes
        )
        SELECT count(*), coalesce(sum(bytes), 0) INTO gone, freed FROM g;
        IF gone > 0 THEN
            INSERT INTO counters (kind, shard, bytes) VALUES ('results', p_instance, -freed)
            ON CONFLICT (kind, shard) DO UPDATE SET bytes = counters.bytes + excluded.bytes;
        END IF;
        admitted := true;
    END
    $$
    """
_V1_PARAMS = "p_targets_per_job bigint, p_jobs_per_caller bigint, p_jobs_total bigint,"
_V1_INSERT = """INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, created_at,
            updated_at, lease, instance)
        VALUES (p_id, p_caller, p_class, p_key, 'queued', cardinality(p_urls), p_now, p_now,
            p_now, p_instance);"""
_V2_INSERT = """INSERT INTO jobs (id, caller, caller_class, key, status, targets_total, created_at,
            updated_at, lease, instance, workspace, retry_of, webhook, hook_open)
        VALUES (p_id, p_caller, p_class, p_key, 'queued', cardinality(p_urls), p_now, p_now,
            p_now, p_instance, p_workspace, p_retry_of, p_webhook, p_webhook <> '');"""
assert _ADMIT_JOB.count(_V1_PARAMS) == 1
assert _ADMIT_JOB.count(_V1_INSERT) == 1
_ADMIT_JOB_V2 = _ADMIT_JOB.replace(
    _V1_PARAMS, _V1_PARAMS + "\n        p_workspace text, p_retry_of text, p_webhook text,"
).replace(_V1_INSERT, _V2_INSERT)

# Each migration takes the schema from version i to i + 1; all of them run in one transaction
# behind an advisory lock, so two instances migrating at once do it one after the other.
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE instances (
        id text PRIMARY KEY,
        pid integer NOT NULL,
        timeout double precision NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE jobs (
        seq bigserial NOT NULL,
        id text PRIMARY KEY,
        caller text NOT NULL,
        caller_class text NOT NULL,
        key text NOT NULL,
        status text NOT NULL,
        error text NOT NULL DEFAULT '',
        targets_total integer NOT NULL,
        targets_done integer NOT NULL DEFAULT 0,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        lease double precision NOT NULL,
        bytes bigint NOT NULL DEFAULT 0,
        instance text NOT NULL
    );
    CREATE INDEX jobs_by_key ON jobs (caller, key, created_at DESC, seq DESC);
    CREATE INDEX jobs_live_by_caller ON jobs (caller) WHERE status IN {LIVE_SQL};
    CREATE INDEX jobs_live_by_instance ON jobs (instance) WHERE status IN {LIVE_SQL};
    CREATE INDEX jobs_finished ON jobs (lease, seq) WHERE status NOT IN {LIVE_SQL};
    CREATE TABLE targets (
        job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        idx integer NOT NULL,
        url text NOT NULL,
        options text NOT NULL,
        status text NOT NULL,
        result text,
        error text NOT NULL DEFAULT '',
        hint text NOT NULL DEFAULT '',
        PRIMARY KEY (job_id, idx)
    );
    -- Stored result bytes, one shard per instance (so instances never wait on each other's
    -- counter row) plus shard '' that absorbs the shards of instances that are gone.
    CREATE TABLE counters (
        kind text NOT NULL,
        shard text NOT NULL,
        bytes bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (kind, shard)
    );
    INSERT INTO counters (kind, shard) VALUES ('results', '')
    """,
    """
    CREATE TABLE web_cache (
        key text PRIMARY KEY,
        seq bigserial NOT NULL,
        body bytea NOT NULL,
        meta text NOT NULL,
        stored_at double precision NOT NULL,
        expires_at double precision NOT NULL,
        bytes bigint NOT NULL
    );
    CREATE INDEX web_cache_by_age ON web_cache (stored_at, seq);
    INSERT INTO counters (kind, shard) VALUES ('cache', '')
    """,
    _ADMIT_JOB,
    # The listing index of GET /v1/batch (SPEC §7): a page costs its rows.
    "CREATE INDEX jobs_by_caller ON jobs (caller, created_at DESC, id DESC)",
    # SPEC §7: what resume needs to run a job again (the caller's workspace), retry's link, the
    # webhook and its delivery state (hook_*: see stores/_outbox), and each target's times.
    """
    ALTER TABLE jobs ADD COLUMN workspace text NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN retry_of text NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN webhook text NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN hook_open boolean NOT NULL DEFAULT false;
    ALTER TABLE jobs ADD COLUMN hook_cursor integer NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_attempts integer NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_since double precision NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN hook_next_at double precision NOT NULL DEFAULT 0;
    CREATE INDEX jobs_hooks ON jobs (hook_next_at) WHERE hook_open;
    ALTER TABLE targets ADD COLUMN started_at double precision;
    ALTER TABLE targets ADD COLUMN finished_at double precision
    """,
    "DROP FUNCTION admit_job(integer, text, text, text, text, double precision, "
    "double precision, text, text[], text[], bigint, bigint, bigint)",
    _ADMIT_JOB_V2,
]
# admit_job's sweep spares a finished job whose webhook is still to deliver (stores/_outbox): the
# same function otherwise, replaced in place.
_SWEEP = f"DELETE FROM jobs WHERE status NOT IN {LIVE_SQL} AND lease < p_now - p_ttl"
assert MIGRATIONS[6].count(_SWEEP) == 1
MIGRATIONS.append(
    MIGRATIONS[6]
    .replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    .replace(_SWEEP, _SWEEP + " AND NOT hook_open")
)


# The fleet's rotation (stores/_postgres/_claims): each live job's place in one round robin
# (turn), the first target it may still have to run (next_idx, a lower bound), its claim (a
# token, the instance holding it, a deadline on the database's clock) and, for a busy target
# whose turn was given back, when it first came back busy. A trigger notifies the schema's
# channel when a job becomes claimable. Code of a release before this one refuses the schema
# (newer than it knows), so an old instance never runs beside the claims.
MIGRATIONS.append(
    f"""
    CREATE SEQUENCE turns;
    ALTER TABLE jobs ADD COLUMN turn bigint NOT NULL DEFAULT nextval('turns');
    ALTER TABLE jobs ADD COLUMN next_idx integer NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN claim text;
    ALTER TABLE jobs ADD COLUMN claim_instance text NOT NULL DEFAULT '';
    ALTER TABLE jobs ADD COLUMN claim_until timestamptz;
    ALTER TABLE jobs ADD COLUMN busy_since double precision;
    CREATE INDEX jobs_turns ON jobs (turn) WHERE status IN {LIVE_SQL};
    CREATE INDEX jobs_claims ON jobs (claim) WHERE claim IS NOT NULL;
    CREATE FUNCTION turns_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM changed WHERE claim IS NULL AND status IN {LIVE_SQL}) THEN
            PERFORM pg_notify('tbt_' || md5(TG_TABLE_SCHEMA), '');
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER jobs_turns_inserted AFTER INSERT ON jobs REFERENCING NEW TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION turns_changed();
    CREATE TRIGGER jobs_turns_updated AFTER UPDATE ON jobs REFERENCING NEW TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION turns_changed()
    """
)

# Each job's webhook outbox is claimed by one instance's dispatcher at a time (stores/_outbox):
# a token, and a deadline on the database's clock (NULL, NULL: unclaimed). The partial index
# jobs_hooks still finds the due outboxes; the claim is tested on its few rows.
MIGRATIONS.append(
    """
    ALTER TABLE jobs ADD COLUMN hook_claim text;
    ALTER TABLE jobs ADD COLUMN hook_claim_until timestamptz
    """
)

# The fleet's budgets per scope (stores/_postgres/_claims): each target's scope as admitted
# (admit_job takes them), and the scopes that have a clock running: spacing (next_start, the
# site's crawl_delay) or a backoff (blocked_until; blocked_since, the first rate-limit event
# since the last success; backoff_at, the last event counted); and the leases of requests made
# outside the rotation (POST /v1/fetch, a redirect to another host, robots.txt), which count
# against their scope's budget beside the claims. Times are the database's clock.
_INSERT_TARGETS = """INSERT INTO targets (job_id, idx, url, options, status)
        SELECT p_id, t.i - 1, t.u, t.o, 'pending'
        FROM unnest(p_urls, p_opts) WITH ORDINALITY AS t (u, o, i);"""
_INSERT_SCOPED = """INSERT INTO targets (job_id, idx, url, options, status, scope)
        SELECT p_id, t.i - 1, t.u, t.o, 'pending', t.s
        FROM unnest(p_urls, p_opts, p_scopes) WITH ORDINALITY AS t (u, o, s, i);"""
_V2_PARAMS = "p_workspace text, p_retry_of text, p_webhook text,"
assert MIGRATIONS[7].count(_INSERT_TARGETS) == 1
assert MIGRATIONS[7].count(_V2_PARAMS) == 1
MIGRATIONS.append(
    """
    ALTER TABLE targets ADD COLUMN scope text;
    CREATE TABLE scopes (
        scope text PRIMARY KEY,
        next_start timestamptz NOT NULL DEFAULT '-infinity',
        crawl_delay double precision NOT NULL DEFAULT 0,
        blocked_until timestamptz NOT NULL DEFAULT '-infinity',
        blocked_since timestamptz,
        backoff_at timestamptz NOT NULL DEFAULT '-infinity',
        touched_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE scope_leases (
        token text PRIMARY KEY,
        scope text NOT NULL,
        instance text NOT NULL,
        until timestamptz NOT NULL
    );
    CREATE INDEX scope_leases_by_scope ON scope_leases (scope);
    DROP FUNCTION admit_job(integer, text, text, text, text, double precision,
        double precision, text, text[], text[], bigint, bigint, bigint, text, text, text);
    """
    + MIGRATIONS[7]
    .replace(_V2_PARAMS, _V2_PARAMS + " p_scopes text[],")
    .replace(_INSERT_TARGETS, _INSERT_SCOPED)
)


# Claims per target (issue 35): a claim is one target of a job, so a job runs up to its
# ``concurrency`` targets at once across the fleet. The claim moves from the job's row to the
# target's (token, the instance holding it, deadline, and a busy target's first busy time); the job
# keeps its turn and its concurrency, and counts its failed targets (targets_failed): two outcomes
# of one job may now be stored at once by two instances, and the second, waiting on the job's row,
# reads the count the first left, where a scan of the targets would read them as they were before
# the first (READ COMMITTED). admit_job stores the concurrency. Claims no longer notify (an instance
# that claims wakes nobody): the statements that free a claim do (turns_freed), and an admission
# does, through the insert trigger. Claims held by the job rows of code before this one go back to
# pending: such an instance is refused by this schema, and its outcomes are not stored.
_V3_PARAMS = "p_scopes text[],"
_V3_INSERT = "updated_at, lease, instance, workspace, retry_of, webhook, hook_open)"
_V3_VALUES = "p_now, p_instance, p_workspace, p_retry_of, p_webhook, p_webhook <> '');"
assert MIGRATIONS[10].count(_V3_PARAMS) == 1
assert MIGRATIONS[10].count(_V3_INSERT) == 1
assert MIGRATIONS[10].count(_V3_VALUES) == 1
_ADMIT_JOB_V4 = (
    MIGRATIONS[10][MIGRATIONS[10].index("CREATE OR REPLACE FUNCTION admit_job") :]
    .replace("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION")
    .replace(_V3_PARAMS, _V3_PARAMS + " p_concurrency integer,")
    .replace(_V3_INSERT, _V3_INSERT.replace("hook_open)", "hook_open, concurrency, scopes)"))
    .replace(
        _V3_VALUES,
        _V3_VALUES.replace(
            "'');",
            "'', p_concurrency,\n            "
            "ARRAY(SELECT DISTINCT s FROM unnest(p_scopes) AS s WHERE s IS NOT NULL));",
        ),
    )
)
# A target the claims may take: pending, or running under a claim that expired (its holder
# died: the target is fetched again, stored once), or running under no claim at all (marked
# by start_target, which no engine of a fleet calls: a process that is gone left it).
CLAIMABLE = (
    "tg.status IN ('pending', 'running') AND (tg.status = 'pending' OR tg.claim IS NULL "
    "OR tg.claim_until < clock_timestamp())"
)
# (The status test comes first in CLAIMABLE so that the planner proves the partial index
# targets_claimable usable.)

# The fleet's claims, one target a claim, in one call (migration 12), as three statements of a
# function, each with a snapshot of its own (READ COMMITTED), so that what is counted is counted
# after the locks that make the count exact:
# 1. with budgets (p_scoped), the advisory locks of the scopes the first jobs' targets are on
#    (``jobs.scopes``, each job's hosts as admitted), in scope order (two claimers never both
#    count a scope's last free slot, and never wait for each other in a circle), then each locked
#    scope's room (``_scopes.room``);
# 2. the live jobs of lowest turn with room under their concurrency and a target whose host has
#    room, locked (FOR UPDATE SKIP LOCKED: other claimers pass over them);
# 3. those jobs' first targets whose host has room (at most the job's free concurrency), taken
#    round by round across jobs (every job's first, then every job's second...) in turn order,
#    each scope taking only its room, a spaced scope only among the first p_spaced turns (those
#    for idle workers, so its start is now and the spacing holds between starts); a scope blocked
#    past block_limit is taken to fail its targets with a hint. The targets claimed are running
#    under a token and a deadline, and each job takes a new turn.
_CLAIM_TARGETS = f"""
    CREATE FUNCTION claim_targets(
        p_space integer, p_instance text, p_n integer, p_now double precision,
        p_ttl double precision, p_scoped boolean, p_conc integer, p_interval double precision,
        p_block_limit double precision, p_spaced integer
    ) RETURNS TABLE (
        job_id text, idx integer, token text, url text, options text, caller text,
        workspace text, created_at double precision, has_webhook boolean,
        busy_since double precision, taken_over boolean, caller_class text,
        concurrency integer, scope text, scope_wait double precision,
        scope_blocked_for double precision, crawl text, depth integer, parent integer
    ) LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    #variable_conflict use_column
    DECLARE
        locked text[] := '{{}}';
        one text;
        r_scope text[] := '{{}}';
        r_free bigint[] := '{{}}';
        r_blocked boolean[] := '{{}}';
        r_spacing double precision[] := '{{}}';
        ok text[] := '{{}}';
        chosen text[] := '{{}}';
        widest bigint := 0;
    BEGIN
        IF p_scoped THEN
            SELECT coalesce(array_agg(DISTINCT x.scope ORDER BY x.scope), '{{}}') INTO locked
            FROM (
                SELECT jb.scopes FROM jobs AS jb WHERE jb.status IN {LIVE_SQL}
                ORDER BY jb.turn LIMIT p_n
            ) AS c, unnest(c.scopes) AS x (scope);
            FOREACH one IN ARRAY locked LOOP
                PERFORM pg_advisory_xact_lock({lock_key("p_space", "one")});
            END LOOP;
            WITH h AS (
                SELECT x.scope, count(*) AS n FROM ({held("= ANY(locked)")}) AS x
                GROUP BY x.scope
            ), r AS (
                SELECT l.scope, {room("coalesce(h.n, 0)", "p_conc", "p_interval", "p_block_limit")}
                FROM unnest(locked) AS l (scope)
                LEFT JOIN scopes AS s ON s.scope = l.scope LEFT JOIN h ON h.scope = l.scope
            )
            SELECT coalesce(array_agg(r.scope), '{{}}'), coalesce(array_agg(r.free), '{{}}'),
                coalesce(array_agg(r.blocked), '{{}}'), coalesce(array_agg(r.spacing), '{{}}'),
                coalesce(array_agg(r.scope) FILTER (WHERE r.free > 0 OR r.blocked), '{{}}')
            INTO r_scope, r_free, r_blocked, r_spacing, ok
            FROM r;
        END IF;
        SELECT coalesce(array_agg(q.id), '{{}}'), coalesce(max(q.want), 0) INTO chosen, widest
        FROM (
            SELECT jb.id, least(jb.concurrency, cr.lim - cr.done) - (
                SELECT count(*) FROM targets AS tc WHERE tc.job_id = jb.id
                    AND tc.claim IS NOT NULL AND tc.claim_until >= clock_timestamp()
            ) AS want
            FROM jobs AS jb CROSS JOIN LATERAL (
                SELECT tg.idx FROM targets AS tg WHERE tg.job_id = jb.id AND {CLAIMABLE}
                    AND (NOT p_scoped OR tg.scope IS NULL OR tg.scope = ANY(ok))
                ORDER BY tg.idx LIMIT 1
            ) AS startable LEFT JOIN crawls AS cr ON cr.job_id = jb.id
            WHERE jb.status IN {LIVE_SQL} AND least(jb.concurrency, cr.lim - cr.done) > (
                SELECT count(*) FROM targets AS tc WHERE tc.job_id = jb.id
                    AND tc.claim IS NOT NULL AND tc.claim_until >= clock_timestamp()
            )
            ORDER BY jb.turn
            LIMIT p_n
            FOR UPDATE OF jb SKIP LOCKED
        ) AS q;
        RETURN QUERY
        WITH r AS (
            SELECT * FROM unnest(r_scope, r_free, r_blocked, r_spacing)
                AS r (scope, free, blocked, spacing)
        ), c AS (
            SELECT jb.id, jb.turn, least(jb.concurrency, cr.lim - cr.done) - (
                SELECT count(*) FROM targets AS tc WHERE tc.job_id = jb.id
                    AND tc.claim IS NOT NULL AND tc.claim_until >= clock_timestamp()
            ) AS want
            FROM jobs AS jb LEFT JOIN crawls AS cr ON cr.job_id = jb.id
            WHERE jb.id = ANY(chosen) AND jb.status IN {LIVE_SQL}
        ), x AS (
            SELECT c.id, c.turn, t.idx AS i, t.scope AS sc, t.taken_over, t.busy_since AS busy,
                row_number() OVER (PARTITION BY c.id ORDER BY t.idx) AS k, c.want
            FROM c CROSS JOIN LATERAL (
                SELECT tg.idx, CASE WHEN p_scoped THEN tg.scope END AS scope,
                    tg.claim IS NOT NULL AS taken_over, tg.busy_since
                FROM targets AS tg
                WHERE tg.job_id = c.id AND {CLAIMABLE}
                    AND (NOT p_scoped OR tg.scope IS NULL OR tg.scope = ANY(ok))
                ORDER BY tg.idx LIMIT least(widest, p_n)
            ) AS t
        ), y AS (
            SELECT x.*, row_number() OVER (PARTITION BY x.sc ORDER BY x.k, x.turn) AS sk,
                row_number() OVER (ORDER BY x.k, x.turn) AS rk
            FROM x WHERE x.k <= x.want
        ), pick AS (
            SELECT y.* FROM y LEFT JOIN r ON r.scope = y.sc
            WHERE y.sc IS NULL OR r.blocked
                OR (y.sk <= r.free AND (r.spacing = 0 OR y.rk <= p_spaced))
            ORDER BY y.k, y.turn
            LIMIT p_n
        ), paced AS (
            INSERT INTO scopes AS s (scope, next_start)
            SELECT DISTINCT ON (r.scope) r.scope,
                clock_timestamp() + r.spacing * interval '1 second'
            FROM pick JOIN r ON r.scope = pick.sc WHERE r.spacing > 0 AND NOT r.blocked
            ORDER BY r.scope
            ON CONFLICT ON CONSTRAINT scopes_pkey DO UPDATE SET
                next_start = excluded.next_start, touched_at = clock_timestamp()
        ), tk AS (
            UPDATE targets AS tg SET status = 'running', started_at = p_now,
                claim = md5(p_instance || tg.job_id || tg.idx::text
                    || clock_timestamp()::text || random()::text),
                claim_instance = p_instance,
                claim_until = clock_timestamp() + p_ttl * interval '1 second'
            FROM pick WHERE tg.job_id = pick.id AND tg.idx = pick.i AND {CLAIMABLE}
            RETURNING tg.job_id AS j, tg.idx AS i, tg.claim AS tok, tg.url AS u,
                tg.options AS o, pick.taken_over AS over, pick.busy AS busy, pick.sc AS sc,
                pick.k AS k, pick.turn AS turn, tg.depth AS dp, tg.parent AS pa
        ), nt AS (
            SELECT q.j, nextval('turns') AS turn FROM (
                SELECT tk.j, max(tk.k) AS k, min(tk.turn) AS turn FROM tk GROUP BY tk.j
                ORDER BY 2, 3
            ) AS q
        ), jj AS (
            UPDATE jobs AS jb SET status = 'running', updated_at = p_now, turn = nt.turn
            FROM nt WHERE jb.id = nt.j
            RETURNING jb.id, jb.caller AS cl, jb.workspace AS ws, jb.created_at AS at,
                jb.webhook <> '' AS hook, jb.caller_class AS cc, jb.concurrency AS conc
        )
        SELECT tk.j, tk.i, tk.tok, tk.u, tk.o, jj.cl, jj.ws, jj.at, jj.hook, tk.busy, tk.over,
            jj.cc, jj.conc, tk.sc,
            CASE WHEN s.blocked_until > clock_timestamp()
                THEN extract(epoch FROM s.blocked_until - clock_timestamp())::float8 END,
            extract(epoch FROM clock_timestamp() - s.blocked_since)::float8,
            cw.spec, tk.dp, tk.pa
        FROM tk JOIN jj ON jj.id = tk.j LEFT JOIN scopes AS s ON s.scope = tk.sc
            LEFT JOIN crawls AS cw ON cw.job_id = tk.j
        ORDER BY tk.k, tk.turn;
    END
    $$
    """


MIGRATIONS.append(
    f"""
    ALTER TABLE jobs ADD COLUMN concurrency integer NOT NULL DEFAULT 1;
    ALTER TABLE jobs ADD COLUMN targets_failed integer NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN scopes text[];
    UPDATE jobs SET scopes = ARRAY(
        SELECT DISTINCT scope FROM targets
        WHERE targets.job_id = jobs.id AND targets.scope IS NOT NULL
    ) WHERE status IN {LIVE_SQL};
    UPDATE jobs SET targets_failed = (
        SELECT count(*) FROM targets WHERE targets.job_id = jobs.id AND targets.status = 'failed'
    ) WHERE status IN {LIVE_SQL};
    ALTER TABLE targets ADD COLUMN claim text;
    ALTER TABLE targets ADD COLUMN claim_instance text;
    ALTER TABLE targets ADD COLUMN claim_until timestamptz;
    ALTER TABLE targets ADD COLUMN busy_since double precision;
    UPDATE targets SET status = 'pending' FROM jobs
        WHERE targets.job_id = jobs.id AND jobs.claim IS NOT NULL
            AND targets.status = 'running';
    UPDATE jobs SET claim = NULL, claim_until = NULL WHERE claim IS NOT NULL;
    DROP INDEX jobs_claims;
    CREATE INDEX targets_claimable ON targets (job_id, idx)
        WHERE status IN ('pending', 'running');
    CREATE INDEX targets_claimed ON targets (job_id) WHERE claim IS NOT NULL;
    DROP TRIGGER jobs_turns_updated ON jobs;
    CREATE FUNCTION turns_freed() RETURNS void LANGUAGE sql AS $$
        SELECT pg_notify('tbt_' || md5(current_schema()), '')
    $$;
    DROP FUNCTION admit_job(integer, text, text, text, text, double precision,
        double precision, text, text[], text[], bigint, bigint, bigint, text, text, text,
        text[]);
    {_ADMIT_JOB_V4};
    {CRAWL_TABLES};
    {_CLAIM_TARGETS}
    """
)


# The claims, migration 13: the same rules, fewer rows read and written.
# - A claim reads the jobs it takes, not every live job. Planned by cost, its walk of the live
#   jobs in turn order read them all, with two subqueries each, and sorted them (the tables'
#   statistics are young while a fleet's first jobs run, and a plan of PL/pgSQL is kept): a claim
#   took 158 ms at 10,000 live jobs (W4 on PostgreSQL: 2.3 ms a target, 0.33 at 100 live jobs),
#   and its chosen jobs were found again by a scan of every live job. The function now plans as
#   the writer does (_threads.WRITER_SETTINGS): no sort where an index gives the order, no bitmap
#   or sequential scan, nested loops; so the walk follows ``jobs_turns`` and stops at its
#   ``p_n``th job, a job's first targets follow ``targets_claimable`` in index order, and the
#   chosen jobs are found by key (their status is not tested again: this claim has locked them).
#   JIT is off: the planner's cost of a disabled sort would otherwise make it compile the
#   statement at every run (over a second).
# - A claim that fills its job (no room left under its concurrency) leaves the job's row alone:
#   the job cannot be claimed again before an outcome of it is stored, and storing it gives the
#   job its new turn, so the turn the claim used to give it was never read. Only a job with room
#   left goes to the end of the rotation at once, and a queued job becomes running. The answer
#   reads the job's columns from the claim's snapshot of them (``c``). Jobs of concurrency 1 (the
#   engine's default, W1): one row written a target fewer, a row with six indexes on a live job.
#   A claim given back at close, or taken over after its expiry, finds its job at the turn it
#   waited for, as RELEASE_ALL_SQL intends. The price: the jobs the fleet's claims fill keep their
#   places at the front of the walk, which passes over them (one index probe each, at most the
#   claims held) where it used to find them at the end.
_C_COLUMNS = "SELECT jb.id, jb.turn, least(jb.concurrency, cr.lim - cr.done) - ("
_C_COLUMNS_V13 = (
    "SELECT jb.id, jb.turn, jb.caller, jb.workspace, jb.created_at, jb.webhook <> '' AS hook,\n"
    "                jb.caller_class, jb.concurrency, least(jb.concurrency, cr.lim - cr.done) - ("
)
_TURNS_END = "AS conc\n        )"  # the end of jj, the update that gives the new turns
_TURNS = _CLAIM_TARGETS[
    _CLAIM_TARGETS.index("), nt AS (") : _CLAIM_TARGETS.index(_TURNS_END) + len(_TURNS_END)
]  # the new turns of the jobs claimed (nt) and the update that gives them (jj)
_TURNS_V13 = """), took AS (
            SELECT tk.j, max(tk.k) AS k, min(tk.turn) AS turn, count(*) AS n FROM tk
            GROUP BY tk.j
        ), nt AS (
            SELECT q.j, nextval('turns') AS turn FROM (
                SELECT took.j, took.k, took.turn FROM took JOIN c ON c.id = took.j
                WHERE took.n < c.want ORDER BY 2, 3
            ) AS q
        ), jj AS (
            UPDATE jobs AS jb SET status = 'running', updated_at = p_now,
                turn = coalesce(nt.turn, jb.turn)
            FROM took LEFT JOIN nt ON nt.j = took.j
            WHERE jb.id = took.j AND (nt.turn IS NOT NULL OR jb.status = 'queued')
        )"""
_ANSWER = """SELECT tk.j, tk.i, tk.tok, tk.u, tk.o, jj.cl, jj.ws, jj.at, jj.hook, tk.busy, tk.over,
            jj.cc, jj.conc, tk.sc,"""
_ANSWER_V13 = """SELECT tk.j, tk.i, tk.tok, tk.u, tk.o, c.caller, c.workspace, c.created_at, c.hook,
            tk.busy, tk.over, c.caller_class, c.concurrency, tk.sc,"""
_ANSWER_JOIN = "FROM tk JOIN jj ON jj.id = tk.j LEFT JOIN"
_HEAD = "LANGUAGE plpgsql SET search_path FROM CURRENT AS $$"
_HEAD_V13 = (
    "LANGUAGE plpgsql SET search_path FROM CURRENT\n"
    "    SET enable_sort TO off SET enable_bitmapscan TO off SET enable_seqscan TO off\n"
    "    SET enable_hashjoin TO off SET enable_mergejoin TO off SET jit TO off AS $$"
)
_C_WHERE = f"WHERE jb.id = ANY(chosen) AND jb.status IN {LIVE_SQL}"
for _old in (_C_COLUMNS, _TURNS, _ANSWER, _ANSWER_JOIN, _HEAD, _C_WHERE):
    assert _CLAIM_TARGETS.count(_old) == 1
MIGRATIONS.append(
    _CLAIM_TARGETS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    .replace(_C_COLUMNS, _C_COLUMNS_V13)
    .replace(_TURNS, _TURNS_V13)
    .replace(_ANSWER, _ANSWER_V13)
    .replace(_ANSWER_JOIN, "FROM tk JOIN c ON c.id = tk.j LEFT JOIN")
    .replace(_HEAD, _HEAD_V13)
    .replace(_C_WHERE, "WHERE jb.id = ANY(chosen)")
)


# The live jobs counted as they change, migration 14: an admission read every live job to check
# the caps (``jobs_per_caller``, ``jobs_total``), under the lock that serialises admissions
# across the fleet: 3 ms of an admission's 3.5-4 ms at 10,000 live jobs. Now each job's moves in
# and out of the live statuses (admitted, ended, cancelled, failed by a reap, deleted while live)
# add to or take from a count per caller in ``live_jobs``, and an admission sums those counts.
# Each connection (backend) counts in a shard of its own, as the result bytes are counted per
# instance (``counters``): two writers ending jobs of one caller never wait on one row, nor
# deadlock on two. Shards of connections gone, and counts at zero, are folded into shard ''
# (``_sql.fold_shards``). The counts start from the live jobs of the schema.
_CAPS_COUNT = f"""SELECT count(*) FILTER (WHERE caller = p_caller), count(*)
        INTO caller_live, total_live
        FROM jobs WHERE status IN {LIVE_SQL};"""
_CAPS_COUNT_V14 = """SELECT coalesce(sum(n) FILTER (WHERE caller = p_caller), 0),
            coalesce(sum(n), 0)
        INTO caller_live, total_live
        FROM live_jobs;"""
assert _ADMIT_JOB_V4.count(_CAPS_COUNT) == 1
MIGRATIONS.append(
    f"""
    CREATE TABLE live_jobs (
        caller text NOT NULL,
        shard text NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (caller, shard)
    );
    INSERT INTO live_jobs (caller, shard, n)
        SELECT caller, '', count(*) FROM jobs WHERE status IN {LIVE_SQL} GROUP BY caller;
    CREATE FUNCTION live_jobs_moved() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        INSERT INTO live_jobs AS l (caller, shard, n)
        VALUES (
            CASE WHEN TG_OP = 'DELETE' THEN OLD.caller ELSE NEW.caller END,
            pg_backend_pid()::text,
            CASE WHEN TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.status IN {LIVE_SQL})
                THEN 1 ELSE -1 END
        )
        ON CONFLICT ON CONSTRAINT live_jobs_pkey DO UPDATE SET n = l.n + excluded.n;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER jobs_live_admitted AFTER INSERT ON jobs FOR EACH ROW
        WHEN (NEW.status IN {LIVE_SQL}) EXECUTE FUNCTION live_jobs_moved();
    CREATE TRIGGER jobs_live_moved AFTER UPDATE OF status ON jobs FOR EACH ROW
        WHEN ((OLD.status IN {LIVE_SQL}) <> (NEW.status IN {LIVE_SQL}))
        EXECUTE FUNCTION live_jobs_moved();
    CREATE TRIGGER jobs_live_deleted AFTER DELETE ON jobs FOR EACH ROW
        WHEN (OLD.status IN {LIVE_SQL}) EXECUTE FUNCTION live_jobs_moved();
    """
    + _ADMIT_JOB_V4.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
        _CAPS_COUNT, _CAPS_COUNT_V14
    )
)


def statements(migration: str) -> list[str]:
    """The statements of a migration: split on ``;`` except inside a ``$$`` function body.

    A migration that is one function alone (``CREATE FUNCTION ... $$ ... $$``) is one
    statement; in others the parts between ``$$`` pairs are bodies, kept whole.
    """
    parts = migration.split("$$")
    found: list[str] = [""]
    for i, part in enumerate(parts):
        if i % 2:  # a function body, with its $$ marks
            found[-1] += "$$" + part + "$$"
            continue
        pieces = part.split(";")
        found[-1] += pieces[0]
        found.extend(pieces[1:])
    return [statement for statement in found if statement.strip()]


def lock_space(schema: str) -> int:
    """A stable signed 32-bit number for ``schema``: the first key of its advisory locks."""
    value = zlib.crc32(f"trio_batch:{schema}".encode())
    return value - 2**32 if value >= 2**31 else value


def advisory_lock(conn: Conn, space: int, key: int) -> None:
    """Take advisory lock ``(space, key)`` until the current transaction ends."""
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (space, key))


def migrate(conn: Conn, schema: str, space: int) -> None:
    """Bring the schema to ``SCHEMA_VERSION`` in one transaction, one migrator at a time.

    Raises:
        StoreError: the schema is newer than this code knows; nothing was changed.
    """
    with conn.transaction():
        advisory_lock(conn, space, LOCK_MIGRATE)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        if row is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (0)")
            version = 0
        else:
            version = int(row[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"schema {schema!r} has version {version}, newer than this trio-batch knows "
                f"({SCHEMA_VERSION}): upgrade trio-batch"
            )
        for target_version in range(version + 1, SCHEMA_VERSION + 1):
            for statement in statements(MIGRATIONS[target_version - 1]):
                conn.execute(statement.encode())
            conn.execute("UPDATE schema_version SET version = %s", (target_version,))
