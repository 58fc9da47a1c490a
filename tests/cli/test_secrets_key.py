"""`trio-batch keys secrets-key` writes the fleet's secrets key file; `serve` refuses a bad one."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support import CLEAN_ENV
from trio_batch._cli import main
from trio_batch._cli._settings import load_settings
from trio_batch._sealing import SecretsKeyFileError, read_key_file
from trio_batch.http import add_key as add_api_key

from .support import add_key, cli_without, serve_until_it_stops

pytest.importorskip("cryptography")


def keys_of(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line]


class TestSecretsKeyCommand:
    def test_it_writes_a_private_file_and_never_prints_the_key(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A new file of one key, mode 600, that serve reads; the output names the flag and
        holds no key."""
        path = tmp_path / "secrets.key"

        assert 0 == main(["keys", "secrets-key", str(path)])
        out, err = capsys.readouterr()
        [key] = keys_of(path)
        assert 0o600 == stat.S_IMODE(os.stat(path).st_mode)
        assert 1 == len(read_key_file(str(path)))
        assert f"--secrets-key-file {path}" in out
        assert key not in out + err
        assert key[:12] not in out + err

    def test_again_rotates_new_key_first(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Run again, it adds a key as the first line and keeps the old one after it."""
        path = tmp_path / "secrets.key"
        main(["keys", "secrets-key", str(path)])
        [old] = keys_of(path)

        assert 0 == main(["keys", "secrets-key", str(path)])
        new, kept = keys_of(path)
        assert old == kept != new
        assert "first line" in capsys.readouterr().out

    def test_standby_then_promote(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--standby adds the key last and says to --promote it once every instance has it;
        --promote moves it first."""
        path = tmp_path / "secrets.key"
        main(["keys", "secrets-key", str(path)])
        [first] = keys_of(path)

        assert 0 == main(["keys", "secrets-key", str(path), "--standby"])
        assert first == keys_of(path)[0]
        assert "--promote" in capsys.readouterr().out
        standby = keys_of(path)[1]
        assert 0 == main(["keys", "secrets-key", str(path), "--promote"])
        assert [standby, first] == keys_of(path)

    def test_a_malformed_file_is_refused_and_left_alone(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Exit 2 with one line naming the file and the line; the file is unchanged."""
        path = tmp_path / "secrets.key"
        path.write_text("# ours\nnot-a-key\n")

        assert 2 == main(["keys", "secrets-key", str(path)])
        err = capsys.readouterr().err
        assert err.startswith(f"trio-batch keys secrets-key: secrets key file {path}, line 2:")
        assert "not-a-key" not in err
        assert "# ours\nnot-a-key\n" == path.read_text()


class TestServeRefusesABadFile:
    def test_the_flags_help_names_the_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`serve --help` says which command writes the file the flag wants."""
        with pytest.raises(SystemExit):
            main(["serve", "--help"])
        out = " ".join(capsys.readouterr().out.split())

        assert "--secrets-key-file FILE" in out
        assert "trio-batch keys secrets-key FILE" in out

    async def test_the_service_stops_before_it_starts(self, tmp_path: Path) -> None:
        """A malformed key file stops the service before it opens the store: the error
        names the file and the line, never a key."""
        from trio_batch._cli._service import run_service

        add_api_key(tmp_path / "keys.toml", "alice")
        good = "q" * 43 + "="
        bad = tmp_path / "secrets.key"
        bad.write_text(f"{good}\n{good[:20]}\n")
        bad.chmod(0o600)
        settings = load_settings(
            {
                "keys": str(tmp_path / "keys.toml"),
                "db": str(tmp_path / "db.sqlite"),
                "secrets_key_file": str(bad),
            },
            environ={},
        )

        with pytest.raises(SecretsKeyFileError) as info:
            await run_service(settings)
        assert f"secrets key file {bad}, line 2: not a key" in str(info.value)
        assert good[:20] not in str(info.value)
        assert not (tmp_path / "db.sqlite").exists()

    @pytest.mark.slow
    async def test_serve_exits_2_with_one_line(self, tmp_path: Path) -> None:
        """`serve --secrets-key-file` on a file that is not a key file: exit 2, one line
        naming the file and the line and the command that writes one."""
        await add_key(tmp_path)
        (tmp_path / "secrets.key").write_text("# header\n\nsecret-looking-text\n")
        (tmp_path / "secrets.key").chmod(0o600)

        code, err = await serve_until_it_stops(
            ["--db", "db.sqlite", "--port", "0", "--secrets-key-file", "secrets.key"], tmp_path
        )

        assert 2 == code
        assert err == (
            "trio-batch serve: secrets key file secrets.key, line 3: not a key (a key is 32 "
            "random bytes in URL-safe base64, 44 characters on a line of its own); make one "
            "with `trio-batch keys secrets-key FILE`"
        )


class TestWithoutCryptography:
    def test_keys_are_written_and_serve_says_what_to_install(self, tmp_path: Path) -> None:
        """Without the cryptography package a key file is still written (random bytes need no
        extra), and serve with it exits 2 naming the package and the extra to install."""
        cli = cli_without("cryptography")
        wrote = subprocess.run(
            [*cli, "keys", "secrets-key", "secrets.key"], cwd=tmp_path, env=CLEAN_ENV, check=False
        )
        add_api_key(tmp_path / "keys.toml", "alice")
        args = ["--keys", "keys.toml", "--db", "db.sqlite", "--secrets-key-file", "secrets.key"]
        served = subprocess.run(
            [*cli, "serve", "--port", "0", *args],
            cwd=tmp_path,
            env=CLEAN_ENV,
            capture_output=True,
            text=True,
            check=False,
        )

        assert 0 == wrote.returncode
        assert 2 == served.returncode
        assert served.stderr.endswith(
            "trio-batch serve: --secrets-key-file needs the cryptography package: "
            "pip install 'trio-batch[server]'\n"
        )
