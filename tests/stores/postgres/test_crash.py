"""A process that dies without closing: its jobs are interrupted, its stored targets kept.

This test runs a real process and real heartbeats, so it waits on the real clock with short
timeouts (the child's ``instance_timeout`` is one second).
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
    async def test_killed_engine_jobs_are_interrupted_and_stored_targets_kept(
        self, pg_dsn: str, pg_schema: str
    ) -> None:
        """SIGKILL an engine mid-job: another marks it interrupted in time, keeping its targets."""
        async with (
            PostgresStore.open(
                pg_dsn, schema=pg_schema, instance_timeout=1.0, heartbeat=0.2
            ) as store,
            open_engine(store, ScriptedFetch()),
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
                # The child's running mark is committed by its writer's next batch, without
                # the fetch waiting for it: poll the database until it is there.
                while True:
                    before = await store.snapshot(job_id)
                    assert before is not None
                    if before.targets[2].status is TargetState.RUNNING:
                        break
                    await trio.sleep(0.02)  # a real process: poll the real clock
            proc.kill()
            killed_at = time.monotonic()
            await proc.wait()

            with trio.fail_after(crash_child.TIMEOUT + 0.2 + SLACK + 5):
                while True:
                    after = await store.snapshot(job_id)
                    assert after is not None
                    if after.job.status is not JobStatus.RUNNING:
                        break
                    await trio.sleep(0.02)  # a real process: poll the real clock
            elapsed = time.monotonic() - killed_at

        assert before is not None
        assert [TargetState.DONE, TargetState.DONE, TargetState.RUNNING, TargetState.PENDING] == [
            t.status for t in before.targets
        ]
        assert (JobStatus.FAILED, "interrupted") == (after.job.status, after.job.error)
        assert elapsed <= crash_child.TIMEOUT + 0.2 + SLACK
        assert before.targets[:2] == after.targets[:2]
        assert [TargetState.PENDING, TargetState.PENDING] == [t.status for t in after.targets[2:]]
