"""A Hypothesis state machine over the stores: SQLite (and PostgreSQL when TRIO_BATCH_TEST_PG is
set) must answer every operation exactly as MemoryStore, the reference, and hold the same jobs.

It is the one agreement test: every method of the ``Store`` protocol is a rule (admission with
its caps, reuse and TTL sweep; start, release, finish with byte-cap eviction; cancel, interrupt,
recover, touch; the web cache's put with its cap, and get), and ``snapshot`` is the invariant.
The stores stay open across rules through a Trio guest run; no engine and no virtual time are
involved, so thread timing cannot make the two disagree.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.stores.postgres.support import PG_DSN, SKIP_REASON

from .support import StoreAgreement

pytestmark = pytest.mark.slow


class PostgresAgreement(StoreAgreement):
    backend = "postgres"


StoreAgreement.TestCase.settings = settings(stateful_step_count=30, deadline=None)
TestSQLiteAgreesWithMemory = StoreAgreement.TestCase

PostgresAgreement.TestCase.settings = settings(
    max_examples=min(settings().max_examples, 40), stateful_step_count=30, deadline=None
)
TestPostgresAgreesWithMemory = pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)(
    PostgresAgreement.TestCase
)
