"""The command line in each install: bare, `[web,cli]`, `[server]` and `[all]`, each made by
hiding the modules the missing extras would bring (a subprocess each: about a second)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support import CLEAN_ENV

from .support import CLI, cli_without

NO_SERVER = cli_without("starlette", "hypercorn")
HINT = "pip install 'trio-batch[server]'"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NO_SERVER, *args], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, check=False
    )


class TestWithoutTheServerExtra:
    def test_help_lists_every_command(self, tmp_path: Path) -> None:
        """`trio-batch --help` works without starlette and hypercorn, and still lists serve."""
        done = _run(["--help"], tmp_path)

        assert (0, "") == (done.returncode, done.stderr)
        assert all(name in done.stdout for name in ("run", "status", "serve", "keys"))

    def test_serve_says_what_to_install(self, tmp_path: Path) -> None:
        """`serve` exits 2 with one line naming the missing module and the extra to install."""
        done = _run(["serve", "--port", "0"], tmp_path)

        assert 2 == done.returncode
        assert f"trio-batch serve needs starlette: {HINT}\n" == done.stderr

    def test_keys_says_what_to_install(self, tmp_path: Path) -> None:
        """`keys list` exits 2 with the same hint, and makes no keys file."""
        done = _run(["keys", "list", "--keys", "keys.toml"], tmp_path)

        assert 2 == done.returncode
        assert f"trio-batch keys needs starlette: {HINT}\n" == done.stderr
        assert not (tmp_path / "keys.toml").exists()


BARE = cli_without(
    "httpx", "httpcore", "jq", "pypdf", "regex", "trio_parallel", "rich", "starlette", "hypercorn"
)
"""`pip install trio-batch`: no extra at all."""

SERVER_ONLY = cli_without("rich")
"""`pip install 'trio-batch[server]'`: web and server, without the cli extra's rich."""

ALL = CLI
"""`pip install 'trio-batch[all]'`."""

WEB = "pip install 'trio-batch[web]'"


def _run_with(command: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, *args], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, check=False
    )


class TestEachInstall:
    def test_help_works_in_every_install(self, tmp_path: Path) -> None:
        """Bare, `[server]` and `[all]` (and `[web,cli]` above): `trio-batch --help` lists
        every command, with nothing on stderr."""
        for command in (BARE, SERVER_ONLY, ALL):
            done = _run_with(command, ["--help"], tmp_path)

            assert (0, "") == (done.returncode, done.stderr)
            assert all(name in done.stdout for name in ("run", "retry", "serve", "keys"))

    def test_a_bare_install_names_the_web_extra_for_fetching(self, tmp_path: Path) -> None:
        """Bare: `run` and each `--server` command exit 2 with one line naming `[web]`."""
        (tmp_path / "urls.txt").write_text("https://a.example/\n")
        server = ["--server", "http://127.0.0.1:9", "--key", "k"]

        web = re.escape(WEB)
        # The fetcher names the first of its modules that is missing (import order decides).
        for args, pattern in (
            (["run", "urls.txt"], rf"trio-batch run: the web fetcher needs \w+: {web}\n"),
            (["run", "urls.txt", *server], rf"trio-batch run: --server needs httpx: {web}\n"),
            (["retry", "abc", *server], rf"trio-batch retry: --server needs httpx: {web}\n"),
            (["jobs", *server], rf"trio-batch jobs: --server needs httpx: {web}\n"),
        ):
            done = _run_with(BARE, args, tmp_path)

            assert 2 == done.returncode, args
            assert re.fullmatch(pattern, done.stderr), (args, done.stderr)

    def test_a_bare_install_names_the_server_extra(self, tmp_path: Path) -> None:
        """Bare: `serve` exits 2 with one line naming `[server]`."""
        done = _run_with(BARE, ["serve", "--port", "0"], tmp_path)

        assert (2, f"trio-batch serve needs starlette: {HINT}\n") == (
            done.returncode,
            done.stderr,
        )
