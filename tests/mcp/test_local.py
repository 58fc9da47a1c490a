"""``trio-batch mcp`` as one user's own server: its help, its default of live jobs, and hints
that name its own flags (``serve``'s are for a server shared by many callers).

The settings and the help are read without starting anything; the hints in-process (the SDK's
in-process client over an app of ``create_app`` on a scripted fetch function).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from tests.mcp.support import call, in_process
from trio_batch import Config
from trio_batch._cli import build_parser
from trio_batch._cli._mcp import LOCAL_HINTS, LOCAL_JOBS_PER_CALLER, TOOL_NAMES, _settings
from trio_batch.testing import ScriptedFetch

CAP = 48 * 1024


def mcp_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["mcp", *argv])


@pytest.fixture(autouse=True)
def no_settings_from_outside(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No TRIO_BATCH_* variable of the machine running the tests reaches the settings."""
    for name in list(os.environ):
        if name.startswith("TRIO_BATCH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def test_the_help_counts_and_names_every_tool() -> None:
    """``trio-batch mcp --help`` says how many tools there are and names each one."""
    from trio_batch._mcp import TOOLS

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = subparsers.choices["mcp"].format_help()

    assert TOOL_NAMES == tuple(tool.name for tool in TOOLS)
    assert f"Serve the {len(TOOLS)} MCP tools" in text
    assert [] == [tool.name for tool in TOOLS if tool.name not in text]


def test_one_user_may_have_four_live_jobs_by_default() -> None:
    """Without a setting, the local user may have 4 live jobs (serve's default is 1)."""
    settings = _settings(mcp_args())

    assert LOCAL_JOBS_PER_CALLER == settings.jobs_per_caller
    assert LOCAL_JOBS_PER_CALLER >= 4


@pytest.mark.parametrize("how", ["flag", "variable", "file"])
def test_a_setting_of_live_jobs_holds_even_below_the_default(
    how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--jobs-per-caller, TRIO_BATCH_JOBS_PER_CALLER or the --config file: that number, even 1."""
    argv: list[str] = []
    if how == "flag":
        argv = ["--jobs-per-caller", "1"]
    elif how == "variable":
        monkeypatch.setenv("TRIO_BATCH_JOBS_PER_CALLER", "1")
    else:
        config = tmp_path / "settings.toml"
        config.write_text("jobs_per_caller = 1\n")
        argv = ["--config", str(config)]

    assert 1 == _settings(mcp_args(*argv)).jobs_per_caller


async def busy_answer(hints: dict[str, str] | None) -> dict[str, object]:
    """The tool error of a second live job for a caller allowed one, with ``hints``."""
    fetch = ScriptedFetch()
    gate = fetch.hold("https://a.example/0")
    config = Config(jobs_per_caller=1, targets_per_job=50)
    async with in_process(fetch, cap=CAP, config=config, hints=hints) as client:
        failed, _ = await call(client, "batch_submit", {"targets": ["https://a.example/0"]})
        assert not failed
        refused, answer = await call(client, "batch_submit", {"targets": ["https://b.example/"]})
        gate.set()
    assert refused
    return answer


async def test_a_busy_caller_is_told_the_flag_of_its_own_door() -> None:
    """Over trio-batch mcp the caller_busy hint names its --jobs-per-caller, never serve's."""
    local = await busy_answer(LOCAL_HINTS)
    server = await busy_answer(None)

    assert "caller_busy" == local["code"] == server["code"]
    assert "trio-batch mcp" in str(local["hint"])
    assert "--jobs-per-caller N" in str(local["hint"])
    assert "serve" not in str(local["hint"])
    assert "batch_status with wait" in str(local["hint"])
    assert "trio-batch serve --jobs-per-caller N" in str(server["hint"])
    assert isinstance(local["retry_after"], int)  # whole seconds, as the API sent them
    assert local["retry_after"] >= 5
