"""A ``--db`` that cannot be a store (a text file, a folder): one line, exit 2, nothing left."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from trio_batch._cli import main

from .support import add_key, serve_until_it_stops

URLS = b"https://example.org/\n"

NOT_A_DATABASE = (
    "urls.txt is not a trio-batch database (file is not a database); pass another {flag}"
)
A_FOLDER = "cannot open the database {db}: it is a folder; pass {flag} with a file path"


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder``, with a file's bytes (None for a folder)."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in folder.rglob("*")
    }


def _last_line(err: str) -> str:
    """The last line of ``err`` (``demo`` first says where its site is), checking it ends one."""
    assert err.endswith("\n"), err
    return err.splitlines()[-1]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with urls.txt (one URL) and an empty somedir/, the current directory."""
    (tmp_path / "urls.txt").write_bytes(URLS)
    (tmp_path / "somedir").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


WRITERS = [
    pytest.param(["run", "urls.txt", "--progress", "off"], "run", id="run"),
    pytest.param(["demo", "--quick", "--progress", "off"], "demo", id="demo"),
]


class TestWritingCommands:
    @pytest.mark.parametrize(("args", "command"), WRITERS)
    def test_a_file_that_is_not_a_database_is_a_usage_error(
        self,
        workdir: Path,
        capsys: pytest.CaptureFixture[str],
        args: list[str],
        command: str,
    ) -> None:
        """`--db urls.txt` exits 2 with one line naming the file; it is left as it was."""
        before = _tree(workdir)

        code = main([*args, "--db", "urls.txt"])

        err = capsys.readouterr().err
        assert 2 == code
        assert f"trio-batch {command}: {NOT_A_DATABASE.format(flag='--db')}" == _last_line(err)
        assert "Traceback" not in err
        assert before == _tree(workdir)

    @pytest.mark.parametrize(("args", "command"), WRITERS)
    @pytest.mark.parametrize("db", ["somedir", "somedir/"])
    def test_a_folder_is_a_usage_error(
        self,
        workdir: Path,
        capsys: pytest.CaptureFixture[str],
        args: list[str],
        command: str,
        db: str,
    ) -> None:
        """`--db somedir` exits 2 with one line saying it is a folder; no lock file appears."""
        before = _tree(workdir)

        code = main([*args, "--db", db])

        err = capsys.readouterr().err
        assert 2 == code
        assert f"trio-batch {command}: {A_FOLDER.format(db=db, flag='--db')}" == _last_line(err)
        assert "Traceback" not in err
        assert before == _tree(workdir)


READERS = [
    pytest.param(["jobs"], id="jobs"),
    pytest.param(["status", "abc"], id="status"),
    pytest.param(["results", "abc"], id="results"),
    pytest.param(["results", "abc", "--follow"], id="results --follow"),
    pytest.param(["timeline", "abc"], id="timeline"),
]


class TestReadingCommands:
    @pytest.mark.parametrize("args", READERS)
    def test_a_file_that_is_not_a_database_says_so_in_the_same_words(
        self, workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str]
    ) -> None:
        """A text file given to a reading command gets the writing commands' line, exit 2."""
        before = _tree(workdir)

        code = main([*args, "--db", "urls.txt"])

        assert 2 == code
        assert f"trio-batch {args[0]}: {NOT_A_DATABASE.format(flag='--db')}\n" == (
            capsys.readouterr().err
        )
        assert before == _tree(workdir)

    @pytest.mark.parametrize("args", READERS)
    def test_a_folder_is_named_as_a_folder(
        self, workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str]
    ) -> None:
        """A folder given to a reading command is called a folder, not a missing file."""
        code = main([*args, "--db", "somedir"])

        assert 2 == code
        assert (
            f"trio-batch {args[0]}: {A_FOLDER.format(db='somedir', flag='--db')}\n"
            == capsys.readouterr().err
        )


@pytest.mark.slow
class TestServe:
    @pytest.mark.parametrize(
        ("db", "message"),
        [
            ("urls.txt", NOT_A_DATABASE.format(flag="--db (or TRIO_BATCH_DB)")),
            ("somedir", A_FOLDER.format(db="somedir", flag="--db (or TRIO_BATCH_DB)")),
            ("somedir/", A_FOLDER.format(db="somedir/", flag="--db (or TRIO_BATCH_DB)")),
        ],
    )
    async def test_a_db_that_cannot_be_a_store_stops_start_up_with_one_line(
        self, tmp_path: Path, db: str, message: str
    ) -> None:
        """`serve --db` a text file or a folder exits 2 with one line; nothing is left behind."""
        pytest.importorskip("hypercorn")
        (tmp_path / "urls.txt").write_bytes(URLS)
        (tmp_path / "somedir").mkdir()
        await add_key(tmp_path)
        before = await trio.to_thread.run_sync(_tree, tmp_path)

        code, err = await serve_until_it_stops(["--db", db, "--port", "0"], tmp_path)

        assert 2 == code
        assert f"trio-batch serve: {message}" == err
        assert before == await trio.to_thread.run_sync(_tree, tmp_path)
