"""The keys file, `trio-batch keys`, and the settings of `trio-batch serve`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trio_batch._cli import main
from trio_batch.http import (
    KeyRing,
    KeysFileError,
    Settings,
    SettingsError,
    add_key,
    hash_key,
    load_keys,
    load_settings,
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


class TestSettings:
    def test_defaults(self) -> None:
        """With nothing given, the documented defaults apply."""
        s = load_settings({}, environ={})

        assert (s.host, s.port, s.db) == ("127.0.0.1", 8080, "./trio-batch.sqlite")
        assert s == Settings()

    def test_flags_win_over_env_which_wins_over_the_file(self, tmp_path: Path) -> None:
        """Precedence: flags, then TRIO_BATCH_* variables, then the config file."""
        config = tmp_path / "serve.toml"
        config.write_text(
            'port = 1111\nworkers = 3\nhost = "0.0.0.0"\nallow_net = ["10.0.0.0/8"]\n'
        )
        s = load_settings(
            {"port": "3333", "config": str(config)},
            environ={"TRIO_BATCH_PORT": "2222", "TRIO_BATCH_WORKERS": "4"},
        )

        assert (s.port, s.workers, s.host, s.allow_net) == (3333, 4, "0.0.0.0", ("10.0.0.0/8",))

    def test_config_file_from_the_environment(self, tmp_path: Path) -> None:
        """TRIO_BATCH_CONFIG names the config file when --config is absent."""
        config = tmp_path / "serve.toml"
        config.write_text("jobs_total = 50\n")
        s = load_settings({}, environ={"TRIO_BATCH_CONFIG": str(config)})

        assert s.jobs_total == 50

    def test_allow_net_repeats_and_splits(self) -> None:
        """--allow-net repeats; the variable is comma-separated; host bits are tolerated."""
        flags = load_settings({"allow_net": ["127.0.0.1/8", "::1/128"]}, environ={})
        env = load_settings({}, environ={"TRIO_BATCH_ALLOW_NET": "127.0.0.0/8, 192.168.1.0/24"})

        assert flags.allow_net == ("127.0.0.0/8", "::1/128")
        assert env.allow_net == ("127.0.0.0/8", "192.168.1.0/24")

    @pytest.mark.parametrize(
        ("flags", "env", "file", "message"),
        [
            ({"workers": "0"}, {}, "", r"^setting workers \(flag --workers\) must be between 1"),
            ({}, {"TRIO_BATCH_TTL": "-5"}, "", r"setting ttl \(environment variable TRIO_"),
            ({}, {}, "max_bytes = 'lots'\n", r"setting max_bytes \(config file .*\) must be a"),
            ({}, {}, "colour = 'red'\n", r"unknown setting 'colour'"),
            ({}, {}, "port = \n", r"not valid TOML"),
            ({"log_level": "loud"}, {}, "", r"setting log_level .* debug, info, warning, error"),
            ({}, {"TRIO_BATCH_ACCESS_LOG": "maybe"}, "", r"setting access_log .* true or false"),
        ],
    )  # fmt: skip
    def test_invalid_settings_name_the_setting_and_its_source(
        self, tmp_path: Path, flags: dict[str, str], env: dict[str, str], file: str, message: str
    ) -> None:
        """An invalid value is refused with the setting's name and where it came from."""
        config = tmp_path / "serve.toml"
        config.write_text(file)

        with pytest.raises(SettingsError, match=message):
            load_settings(flags, environ=env, config_file=str(config) if file else None)

    def test_missing_config_file(self) -> None:
        """A config file that does not exist is an error, not silently ignored."""
        with pytest.raises(SettingsError, match="does not exist"):
            load_settings({"config": "/nonexistent/serve.toml"}, environ={})
