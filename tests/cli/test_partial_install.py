"""The command line with only some extras installed: `[web,cli]` without the server's."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .support import ENV, cli_without

NO_SERVER = cli_without("starlette", "hypercorn")
HINT = "pip install 'trio-batch[server]'"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NO_SERVER, *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=False
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
