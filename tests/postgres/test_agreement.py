"""PostgresStore agrees with MemoryStore, the reference, on any sequence of operations."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import trio
from hypothesis import given

from trio_batch.stores import MemoryStore, PostgresStore

from ..pg_support import PG_DSN, SKIP_REASON, drop_schema
from ..test_properties import OPS, apply_ops

pytestmark = pytest.mark.skipif(not PG_DSN, reason=SKIP_REASON)


@pytest.fixture(scope="module")
def schema() -> Iterator[str]:
    """One migrated schema for every example (emptied before each), dropped at the end."""
    name = f"tb_test_{secrets.token_hex(6)}"

    async def migrate() -> None:
        async with PostgresStore.open(PG_DSN, schema=name):
            pass

    trio.run(migrate)
    try:
        yield name
    finally:
        drop_schema(PG_DSN, name)


class TestAgreement:
    @given(OPS)
    def test_postgres_agrees_with_memory(self, schema: str, ops: list[tuple[object, ...]]) -> None:
        """Any sequence of store operations gives the same answers and states on both stores."""

        async def main() -> None:
            expected = await apply_ops(MemoryStore(), ops)
            async with PostgresStore.open(PG_DSN, schema=schema) as store:
                await store._run(
                    lambda conn: conn.execute(
                        "TRUNCATE jobs, targets, web_cache; UPDATE counters SET bytes = 0"
                    )
                )
                assert expected == await apply_ops(store, ops)

        trio.run(main)
