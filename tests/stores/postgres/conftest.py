from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator

import pytest

from .support import PG_DSN, SKIP_REASON, open_test_schema

if importlib.util.find_spec("psycopg") is None:  # installed without trio-batch[postgres]
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture
def pg_dsn() -> str:
    """The test server's DSN; the test is skipped when TRIO_BATCH_TEST_PG is unset."""
    if not PG_DSN:
        pytest.skip(SKIP_REASON)
    return PG_DSN


@pytest.fixture
async def pg_schema(pg_dsn: str) -> AsyncIterator[str]:
    """A fresh schema for the test, dropped afterwards."""
    async with open_test_schema(pg_dsn) as schema:
        yield schema
