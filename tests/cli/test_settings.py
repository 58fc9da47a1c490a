"""The settings of `trio-batch serve`: defaults, file, environment and flags, and their errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trio_batch._cli._settings import Settings, SettingsError, load_settings


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

    def test_default_concurrency_is_four_and_at_most_max_concurrency(self) -> None:
        """A submit that does not say fetches 4 targets at once unless set; the setting may
        not pass max_concurrency, and the refusal names both and what to change."""
        given = load_settings({}, environ={"TRIO_BATCH_DEFAULT_CONCURRENCY": "6"})

        assert 4 == Settings().default_concurrency
        assert 6 == given.default_concurrency
        with pytest.raises(
            SettingsError,
            match=r"^setting default_concurrency \(its default\) must be at most max_concurrency "
            r"\(2, flag --max-concurrency\) \(got 4\); lower --default-concurrency or raise "
            r"--max-concurrency$",
        ):
            load_settings({"max_concurrency": "2"}, environ={})

    def test_missing_config_file(self) -> None:
        """A config file that does not exist is an error, not silently ignored."""
        with pytest.raises(SettingsError, match="does not exist"):
            load_settings({"config": "/nonexistent/serve.toml"}, environ={})

    def test_an_unknown_trio_batch_variable_is_skipped(self) -> None:
        """A TRIO_BATCH_* variable that names no setting (TRIO_BATCH_KEY, say) is left alone."""
        s = load_settings({}, environ={"TRIO_BATCH_KEY": "k", "TRIO_BATCH_COLOUR": "red"})

        assert s == Settings()


class TestNumbers:
    """Every number setting goes through one parser; its messages stay those of the old three."""

    @pytest.mark.parametrize(
        ("name", "raw", "message"),
        [
            ("port", "x", "must be a whole number"),
            ("port", "70000", "must be between 0 and 65535"),
            ("port", True, "must be a whole number"),
            ("port", 80.5, "must be a whole number"),
            ("shape_memory", "1", "must be >= 268435456"),
            ("render_memory", "1", "must be >= 268435456"),
            ("render_workers", "0", "must be between 1 and 64"),
            ("render_seconds", "0", "must be a number > 0"),
            ("fetch_slots", "-1", "must be between 0 and 4096"),
            ("ttl", "0", "must be a number > 0"),
            ("ttl", "inf", "must be a number > 0"),
            ("ttl", "nan", "must be a number > 0"),
            ("ttl", "soon", "must be a number > 0"),
            ("ttl", False, "must be a number > 0"),
            ("pg_heartbeat", "-1", "must be a number of seconds >= 0"),
            ("pg_heartbeat", "inf", "must be a number of seconds >= 0"),
            ("pg_heartbeat", [], "must be a number of seconds >= 0"),
        ],
    )
    def test_a_bad_number_is_refused_with_what_is_allowed(
        self, name: str, raw: object, message: str
    ) -> None:
        """A value that is no number, or out of range, is refused naming what is allowed."""
        flag = "--" + name.replace("_", "-")
        expected = rf"^setting {name} \(flag {flag}\) {message} \(got {re.escape(repr(raw))}\)$"

        with pytest.raises(SettingsError, match=expected):
            load_settings({name: raw}, environ={})

    @pytest.mark.parametrize(
        ("name", "raw", "value"),
        [
            ("port", " 0 ", 0),
            ("ttl", "1.5", 1.5),
            ("ttl", 7, 7.0),
            ("pg_heartbeat", "0", 0.0),
            ("shape_memory", 2**28, 2**28),
            ("render_workers", "3", 3),
            ("render_seconds", "12.5", 12.5),
        ],
    )
    def test_a_good_number_is_read_as_its_type(self, name: str, raw: object, value: object) -> None:
        """Whole-number settings are ints and seconds are floats, from a string or from TOML."""
        got = getattr(load_settings({name: raw}, environ={}), name)

        assert (value, type(value)) == (got, type(got))
