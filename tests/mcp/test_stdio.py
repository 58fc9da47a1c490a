"""``trio-batch mcp``: the official MCP client starts the command and talks to it over stdio.

Each test runs the command in a process of its own (as an agent's client does), with an engine
in it on a SQLite store in the test's folder, allowed to reach the local pages of
:class:`~tests.mcp.support.Site`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.mcp.support import (
    ENV,
    MCP,
    TOOL_NAMES,
    Site,
    call,
    check_tool_errors,
    command,
    open_served,
    open_site,
    stdio_client,
    walk_the_tools,
)

pytestmark = pytest.mark.slow

ANSWER_BYTES = 8192


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with open_site() as served:
        yield served


async def test_an_agent_walks_every_tool_over_stdio(tmp_path: Path, site: Site) -> None:
    """Over stdio: list, fetch, submit with progress, page the results, retry, cancel."""
    async with stdio_client(command(tmp_path)) as client:
        await walk_the_tools(client, site)


async def test_refusals_and_the_cap_over_stdio(tmp_path: Path, site: Site) -> None:
    """Tool errors with hints, and --answer-bytes cuts a long page to fit, saying so."""
    cmd = command(tmp_path, "--answer-bytes", str(ANSWER_BYTES))
    async with stdio_client(cmd) as client:
        await check_tool_errors(client, site, answer_bytes=ANSWER_BYTES)


async def test_one_user_has_four_live_jobs_and_a_hint_for_more(tmp_path: Path, site: Site) -> None:
    """Four jobs run at once for the local user; a fifth is told trio-batch mcp's own flag."""
    async with stdio_client(command(tmp_path)) as client:
        accepted = [
            await call(client, "batch_submit", {"targets": [site.url(f"/hold/{n}")]})
            for n in range(4)
        ]
        refused, busy = await call(client, "batch_submit", {"targets": [site.url("/page/1")]})
        site.release.set()

    assert [False] * 4 == [failed for failed, _ in accepted]
    assert refused
    assert "caller_busy" == busy["code"]
    assert "4 live batches" in str(busy["error"])
    assert "trio-batch mcp's arguments" in str(busy["hint"])
    assert "serve" not in str(busy["hint"])


async def test_the_default_store_is_in_the_users_data_directory(tmp_path: Path) -> None:
    """Without --db the store is $XDG_DATA_HOME/trio-batch/mcp.sqlite, not the working folder."""
    env = {**ENV, "XDG_DATA_HOME": str(tmp_path / "data")}
    work = tmp_path / "work"
    work.mkdir()
    params = StdioServerParameters(command=MCP[0], args=MCP[1:], env=env, cwd=work)
    async with Client(params) as client:
        listed = await client.list_tools()

    assert len(TOOL_NAMES) == len(listed.tools)
    assert (tmp_path / "data" / "trio-batch" / "mcp.sqlite").exists()
    assert [] == list(work.iterdir())


async def test_a_second_process_on_the_store_gets_a_clear_message(tmp_path: Path) -> None:
    """SQLite has one writer: the second process says who holds the store and what to do."""
    async with stdio_client(command(tmp_path)) as client:
        await client.list_tools()
        second = await trio.run_process(
            command(tmp_path),
            env=ENV,
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    message = second.stderr.decode()
    assert 2 == second.returncode
    assert b"" == second.stdout
    assert "is writing" in message
    assert "--server URL" in message
    assert "Traceback" not in message


async def test_sigterm_stops_it_while_stdin_is_open(tmp_path: Path) -> None:
    """A signal stops the server at once, closing the engine, though the client never hung up."""
    proc = await trio.lowlevel.open_process(
        command(tmp_path, "--log-level", "info"),
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    log = b""
    with trio.fail_after(60):
        while b"MCP on stdio" not in log:
            chunk = await proc.stderr.receive_some()
            assert chunk, log.decode()
            log += chunk
        proc.send_signal(signal.SIGTERM)
        returncode = await proc.wait()
    assert proc.stdin is not None
    await proc.stdin.aclose()

    assert 0 == returncode


async def test_without_the_extra_it_says_what_to_install(tmp_path: Path) -> None:
    """Without the mcp SDK the command names the extra to install, and starts nothing."""
    hide = "import sys; sys.modules['mcp'] = None"
    cmd = [sys.executable, "-c", f"{hide}; from trio_batch._cli import entry; entry()", "mcp"]
    done = await trio.run_process(
        [*cmd, "--db", str(tmp_path / "mcp.sqlite")],
        env=ENV,
        stdin=b"",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )

    assert 2 == done.returncode
    assert "pip install 'trio-batch[mcp]'" in done.stderr.decode()
    assert not (tmp_path / "mcp.sqlite").exists()


async def test_with_server_the_tools_call_a_running_serve(tmp_path: Path, site: Site) -> None:
    """--server: no engine here; the jobs are the server's, made with the key given."""
    async with open_served(tmp_path) as served:
        base = served.url.removesuffix("/mcp")
        cmd = [*MCP, "--server", base]
        async with stdio_client(cmd, env={**ENV, "TRIO_BATCH_KEY": served.alice}) as client:
            failed, job = await call(
                client, "batch_submit", {"targets": [site.url("/page/1")], "wait": 60}
            )
            assert not failed
            failed, page = await call(client, "batch_results", {"id": job["id"]})
        async with stdio_client([*MCP, "--server", base, "--key", served.bob]) as other:
            refused, unseen = await call(other, "batch_status", {"id": job["id"]})

    assert not failed
    assert "done" == job["status"]
    assert "Page 1" in json.dumps(page["results"])
    assert refused
    assert "not_found" == unseen["code"]
    assert not await trio.Path(tmp_path / "mcp.sqlite").exists()
