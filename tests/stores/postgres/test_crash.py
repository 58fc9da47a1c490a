"""A process that dies without closing: the fleet carries its job on, its stored targets kept.

This test runs a real process and real claims, so it waits on the real clock with short
timeouts (the child's ``claim_timeout`` is one second).
"""

from __future__ import annotations

import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import trio

from trio_batch import JobStatus, TargetState, open_engine
from trio_batch.stores import PostgresStore
from trio_batch.testing import ScriptedFetch

from ...support import slack, wait_ended_polling
from . import crash_child

CHILD = Path(crash_child.__file__)
# Slack over instance_timeout + one heartbeat for the thread hops and commits on a busy CI box.
SLACK = 0.75


async def read_until(stream: trio.abc.ReceiveStream, prefix: str, seen: list[str]) -> str:
    """Read the child's lines until one starts with ``prefix``; return it."""
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            text = line.decode()
            seen.append(text)
            if text.startswith(prefix):
                return text
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError(f"the child exited before printing {prefix!r}; it said {seen}")
        buffer += chunk


@pytest.mark.slow
class TestCrash:
    async def test_a_killed_instance_job_is_finished_by_the_fleet(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """SIGKILL an instance mid-job: once its claim expires another instance fetches the
        target again and finishes the job; the targets stored before the kill are kept, and
        each target is stored once (fetched at most twice)."""
        async with (
            PostgresStore.open(pg_dsn, schema=pg_schema) as store,
            trio.open_nursery() as nursery,
        ):
            proc: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    [sys.executable, str(CHILD), pg_dsn, pg_schema],
                    stdout=subprocess.PIPE,
                    check=False,
                )
            )
            assert proc.stdout is not None
            seen: list[str] = []
            with trio.fail_after(30):
                job_id = (await read_until(proc.stdout, "job ", seen)).split()[1]
                await read_until(proc.stdout, "started 2", seen)
                before = await store.snapshot(job_id)  # the claim marked it running
            proc.kill()
            killed_at = time.monotonic()
            await proc.wait()

            begun = time.monotonic()  # one read of the job: the store's round trip, as loaded
            await store.snapshot(job_id)
            read = time.monotonic() - begun
            fetch = ScriptedFetch()
            async with open_engine(store, fetch) as engine:
                within = crash_child.CLAIM_TIMEOUT + 1.0 + slack(SLACK, read) + 5
                await wait_ended_polling(engine, job_id, within=within)  # another's claim
                elapsed = time.monotonic() - killed_at
                after = await engine.status(job_id)
                assert after is not None

        assert before is not None
        assert [TargetState.DONE, TargetState.DONE, TargetState.RUNNING, TargetState.PENDING] == [
            t.status for t in before.targets
        ]
        assert JobStatus.DONE == after.job.status
        assert before.targets[:2] == after.targets[:2]
        assert [before.targets[2].url, before.targets[3].url] == fetch.calls
        assert elapsed <= crash_child.CLAIM_TIMEOUT + 1.0 + slack(SLACK, read)  # expiry, a poll
