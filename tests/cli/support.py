"""What the CLI's test modules share: how to run the command, finished jobs in a store, and a
served ``trio-batch serve`` run to its end."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from tests.support import CLEAN_ENV, wait_ended
from trio_batch import Caller, Config, Target, open_engine
from trio_batch.stores import SQLiteStore
from trio_batch.testing import ScriptedFetch

CLI = [sys.executable, "-c", "from trio_batch._cli import entry; entry()"]
"""The ``trio-batch`` command, in a process of its own (as the installed script runs it)."""


def cli_without(*modules: str) -> list[str]:
    """The ``trio-batch`` command in a process where ``modules`` cannot be imported, as if
    their extra were not installed (``sys.modules[name] = None`` makes an import fail)."""
    hide = "; ".join(f"sys.modules[{name!r}] = None" for name in modules)
    return [sys.executable, "-c", f"import sys; {hide}; from trio_batch._cli import entry; entry()"]


async def make_jobs(db: Path, n: int) -> list[str]:
    """``n`` finished jobs of one target each, in one store."""
    config = Config(jobs_per_caller=n, jobs_total=n)
    async with SQLiteStore.open(db) as store, open_engine(store, ScriptedFetch(), config) as engine:
        subs = [
            await engine.submit(Caller("cli"), "fleet", [Target(f"https://a.example/{i}")])
            for i in range(n)
        ]
        await wait_ended(engine, *(sub.id for sub in subs))

    return [sub.id for sub in subs]


async def add_key(cwd: Path) -> str:
    """Make ``cwd/keys.toml`` with a key for alice, as an operator would; the key."""
    keys = await trio.run_process(
        [*CLI, "keys", "add", "alice", "--keys", "keys.toml"],
        cwd=cwd,
        env=CLEAN_ENV,
        capture_stdout=True,
        capture_stderr=True,
    )

    assert keys.returncode == 0
    return keys.stdout.decode().split()[-1]


@contextlib.asynccontextmanager
async def running_serve(args: list[str], cwd: Path) -> AsyncIterator[tuple[trio.Process, int]]:
    """``trio-batch serve --keys keys.toml --port 0 ARGS`` running in ``cwd``: the process
    and the port it listens on (from its log); stopped with SIGTERM at the end."""
    cmd = [*CLI, "serve", "--keys", "keys.toml", "--port", "0", *args]
    proc = await trio.lowlevel.open_process(cmd, cwd=cwd, env=CLEAN_ENV, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        log = b""
        with trio.fail_after(60):
            while not (found := re.search(rb"serving the trio-batch API on \S+ port (\d+)", log)):
                chunk = await proc.stderr.receive_some()
                assert chunk, f"serve exited before listening:\n{log.decode()}"
                log += chunk
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, proc.stderr)
            yield proc, int(found.group(1))
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    """Read ``stream`` to its end, so a chatty child never blocks on a full pipe."""
    async for _ in stream:
        pass


async def serve_until_it_stops(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``trio-batch serve --keys keys.toml ARGS`` in ``cwd`` until it exits: its status
    and its stderr without the INFO and WARNING log lines."""
    done = await trio.run_process(
        [*CLI, "serve", "--keys", "keys.toml", *args],
        cwd=cwd,
        env=CLEAN_ENV,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )

    lines = [
        line
        for line in done.stderr.decode().splitlines()
        if not re.search(r" (INFO|WARNING) ", line)
    ]
    return done.returncode, "\n".join(lines)
