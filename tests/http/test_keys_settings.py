"""The keys file and `trio-batch keys` (the settings of `trio-batch serve`: tests/cli)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trio_batch._cli import main
from trio_batch.http import (
    KeyRing,
    KeysFileError,
    add_key,
    hash_key,
    load_keys,
)


class TestKeysFile:
    def test_add_stores_the_hash_never_the_key(self, tmp_path: Path) -> None:
        """The file holds name, workspace, class and SHA-256; the key itself is nowhere in it."""
        path = tmp_path / "keys.toml"
        record, key = add_key(path, "alice", workspace="lab", caller_class="restricted")
        text = path.read_text()

        assert key not in text
        assert hash_key(key) in text
        assert (record.name, record.workspace, record.caller_class) == (
            "alice",
            "lab",
            "restricted",
        )
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

    def test_lookup_finds_the_caller_by_key(self, tmp_path: Path) -> None:
        """A key finds its own caller; an unknown key finds nobody."""
        path = tmp_path / "keys.toml"
        _, alice = add_key(path, "alice")
        _, bob = add_key(path, "bob")
        ring = load_keys(path)

        assert (ring.lookup(alice) or pytest.fail("key not found")).name == "alice"
        assert (ring.lookup(bob) or pytest.fail("key not found")).name == "bob"
        assert ring.lookup(alice + "x") is None
        assert ring.lookup("") is None

    def test_a_name_is_added_once(self, tmp_path: Path) -> None:
        """Adding a name that exists is refused, saying how to remove the old one."""
        path = tmp_path / "keys.toml"
        add_key(path, "alice")

        with pytest.raises(KeysFileError, match=r"exists already .* keys remove alice"):
            add_key(path, "alice")

    @pytest.mark.parametrize(
        ("text", "words"),
        [
            ("[[keys]\n", "not valid TOML"),
            ('[[keys]]\nname = "a"\n', r"keys\[0\]\.sha256 is missing"),
            ('[[keys]]\nname = "a"\nsha256 = "abc"\n', "64 hex digits"),
            ('[[keys]]\nname = "a"\nsha256 = "' + "0" * 64 + '"\nclass = "vip"\n', "class must"),
            ('[[keys]]\nname = "a"\nsha256 = "' + "0" * 64 + '"\nkey = "x"\n', "unknown field"),
            ('[[keys]]\nname = "a b"\nsha256 = "' + "0" * 64 + '"\n', "invalid caller name"),
            ('[[keys]]\nname = "a"\nsha256 = "' + "0" * 64 + '"\n' * 1 + '[[keys]]\nname = "a"\n'
             'sha256 = "' + "1" * 64 + '"\n', "more than once"),
        ],
    )  # fmt: skip
    def test_malformed_file_names_the_entry_and_field(self, text: str, words: str) -> None:
        """A bad keys file is refused with a message saying which entry and field."""
        with pytest.raises(KeysFileError, match=words):
            KeyRing.from_toml(text)

    def test_cli_prints_the_key_on_the_last_line_once(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`trio-batch keys add` prints the new key once, as the last line."""
        path = tmp_path / "k.toml"
        code = main(
            ["keys", "add", "carol", "--workspace", "w", "--class", "fleet", "--keys", str(path)]
        )
        lines = capsys.readouterr().out.splitlines()
        key = lines[-1]

        assert code == 0
        assert sum(key in line for line in lines) == 1
        assert (load_keys(path).lookup(key) or pytest.fail("key not found")).name == "carol"

    def test_cli_list_and_remove(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`keys list` shows callers without hashes; `keys remove` takes one out."""
        path = str(tmp_path / "k.toml")
        main(["keys", "add", "carol", "--keys", path])
        capsys.readouterr()
        main(["keys", "list", "--keys", path])
        listed = capsys.readouterr().out
        code = main(["keys", "remove", "carol", "--keys", path])
        again = main(["keys", "remove", "carol", "--keys", path])

        assert "carol\tclass=fleet\n" == listed
        assert (code, again, len(load_keys(path))) == (0, 2, 0)
