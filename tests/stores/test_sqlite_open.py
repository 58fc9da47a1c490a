"""Opening a SQLite store at a path that cannot be one: a clear StoreError, and no trace left."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from trio_batch import StoreError
from trio_batch.stores import SQLiteStore
from trio_batch.stores._sqlite import _schema

TEXT = b"https://example.org/\nhttps://example.com/\n"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


class TestOpenRefusals:
    @pytest.mark.parametrize("readonly", [False, True])
    async def test_a_file_that_is_not_a_database_is_refused_untouched(
        self, tmp_path: Path, readonly: bool
    ) -> None:
        """A text file is refused with a StoreError naming it; nothing is written or left."""
        path = tmp_path / "urls.txt"
        path.write_bytes(TEXT)

        with pytest.raises(
            StoreError,
            match=rf"^{path} is not a trio-batch database \(file is not a database\); "
            r"open another path$",
        ):
            async with SQLiteStore.open(path, readonly=readonly):
                pass

        assert {"urls.txt": TEXT} == _files(tmp_path)

    @pytest.mark.parametrize("readonly", [False, True])
    @pytest.mark.parametrize("slash", ["", "/"])
    async def test_a_folder_is_refused_and_nothing_is_created(
        self, tmp_path: Path, readonly: bool, slash: str
    ) -> None:
        """A folder is refused with a StoreError that says so; no lock file appears anywhere."""
        folder = tmp_path / "somedir"
        folder.mkdir()

        with pytest.raises(
            StoreError,
            match=rf"^{folder}{slash} is a folder, not a database file; open the path of a file "
            r"in it \(a new one is created\)$",
        ):
            async with SQLiteStore.open(f"{folder}{slash}", readonly=readonly):
                pass

        assert ["somedir"] == _tree(tmp_path)

    async def test_a_failed_open_keeps_a_lock_file_it_did_not_create(self, tmp_path: Path) -> None:
        """Only the lock file the failed open made is removed; one there before stays."""
        path = tmp_path / "urls.txt"
        path.write_bytes(TEXT)
        (tmp_path / "urls.txt-lock").write_bytes(b"")

        with pytest.raises(StoreError, match=r"not a trio-batch database"):
            async with SQLiteStore.open(path):
                pass

        assert {"urls.txt": TEXT, "urls.txt-lock": b""} == _files(tmp_path)

    async def test_the_file_opens_once_it_is_replaced_by_a_database(self, tmp_path: Path) -> None:
        """After a refused open the path is free: no lock is held, a new store opens there."""
        path = tmp_path / "jobs.sqlite"
        path.write_bytes(TEXT)
        with pytest.raises(StoreError):
            async with SQLiteStore.open(path):
                pass
        path.unlink()

        async with SQLiteStore.open(path) as store:
            assert await store.snapshot("nothing") is None

    async def test_an_empty_file_becomes_a_new_database(self, tmp_path: Path) -> None:
        """An empty file is what SQLite calls an empty database, so the store starts in it."""
        path = tmp_path / "jobs.sqlite"
        path.write_bytes(b"")

        async with SQLiteStore.open(path) as store:
            assert await store.snapshot("nothing") is None


class TestLockFile:
    def test_a_lock_on_a_removed_lock_file_is_taken_again_on_the_new_one(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """If a failed open removes the lock file between our open and flock, we lock anew."""
        path = str(tmp_path / "jobs.sqlite")
        (tmp_path / "jobs.sqlite-lock").write_bytes(b"")
        real_flock = fcntl.flock
        calls: list[int] = []

        def flock_after_removal(fd: int, operation: int) -> None:
            if not calls:
                os.unlink(path + "-lock")  # what unlock_failed does in the other process
            calls.append(fd)
            real_flock(fd, operation)

        monkeypatch.setattr(fcntl, "flock", flock_after_removal)

        fd, created = _schema.lock_file(path)
        try:
            held, named = os.fstat(fd), os.stat(path + "-lock")

            assert (2, True) == (len(calls), created)
            assert (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
        finally:
            _schema.unlock_failed(path, fd, created)

        assert not os.path.exists(path + "-lock")
