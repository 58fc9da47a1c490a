"""The store settings of `trio-batch serve`: store_timeout and the PostgreSQL ones (issue 11)."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trio_batch import StoreError
from trio_batch._cli import build_parser
from trio_batch._cli._service import open_store, with_statement_timeout
from trio_batch._cli._settings import SPECS, Settings, SettingsError, flag, load_settings

ROOT = Path(__file__).resolve().parents[2]
STORE_SETTINGS = (
    "store_timeout",
    "pg_instance_timeout",
    "pg_heartbeat",
    "pg_pool_size",
    "pg_statement_timeout",
    "pg_call_timeout",
    "pg_connect_timeout",
    "pg_claim_timeout",
    "pg_synchronous_commit",
    "pg_schema",
)


class TestStoreSettings:
    def test_defaults(self) -> None:
        """A request waits 5 s for the store; PostgreSQL gets PostgresStore.open's defaults."""
        s = load_settings({}, environ={})

        assert (s.store_timeout, s.pg_instance_timeout, s.pg_heartbeat, s.pg_pool_size) == (
            5.0,
            30.0,
            0.0,
            4,
        )
        assert (s.pg_statement_timeout, s.pg_call_timeout, s.pg_schema) == (
            0.0,
            30.0,
            "trio_batch",
        )
        assert (s.pg_connect_timeout, s.pg_synchronous_commit) == (10.0, True)

    def test_durability_and_connect_timeout_come_from_flag_env_or_file(
        self, tmp_path: Path
    ) -> None:
        """--no-pg-synchronous-commit and --pg-connect-timeout reach the settings, flags winning."""
        config = tmp_path / "serve.toml"
        config.write_text("pg_synchronous_commit = false\npg_connect_timeout = 4\n")
        from_file = load_settings({}, environ={}, config_file=str(config))
        from_env = load_settings(
            {},
            environ={
                "TRIO_BATCH_PG_SYNCHRONOUS_COMMIT": "true",
                "TRIO_BATCH_PG_CONNECT_TIMEOUT": "2",
            },
            config_file=str(config),
        )
        args = build_parser().parse_args(
            ["serve", "--no-pg-synchronous-commit", "--pg-connect-timeout", "1.5"]
        )
        flags = {
            k: v
            for k, v in vars(args).items()
            if k in ("pg_synchronous_commit", "pg_connect_timeout")
        }
        from_flag = load_settings(flags, environ={"TRIO_BATCH_PG_SYNCHRONOUS_COMMIT": "true"})

        assert (from_file.pg_synchronous_commit, from_file.pg_connect_timeout) == (False, 4.0)
        assert (from_env.pg_synchronous_commit, from_env.pg_connect_timeout) == (True, 2.0)
        assert (from_flag.pg_synchronous_commit, from_flag.pg_connect_timeout) == (False, 1.5)

    def test_from_flags_environment_and_file(self, tmp_path: Path) -> None:
        """Each comes from a flag, a TRIO_BATCH_* variable or the config file, flags winning."""
        config = tmp_path / "serve.toml"
        config.write_text(
            "pg_pool_size = 8\npg_heartbeat = 2\nstore_timeout = 1.5\npg_call_timeout = 9\n"
        )
        s = load_settings(
            {"pg_statement_timeout": "2.5", "store_timeout": "3"},
            environ={"TRIO_BATCH_PG_INSTANCE_TIMEOUT": "12", "TRIO_BATCH_PG_SCHEMA": "blue"},
            config_file=str(config),
        )
        from_env = load_settings(
            {}, environ={"TRIO_BATCH_PG_CALL_TIMEOUT": "7.5"}, config_file=str(config)
        )
        from_flag = load_settings(
            {"pg_call_timeout": "0.25"},
            environ={"TRIO_BATCH_PG_CALL_TIMEOUT": "7.5"},
            config_file=str(config),
        )

        assert (s.pg_pool_size, s.pg_heartbeat, s.store_timeout) == (8, 2.0, 3.0)
        assert (s.pg_instance_timeout, s.pg_statement_timeout, s.pg_schema) == (
            12.0,
            2.5,
            "blue",
        )
        assert (s.pg_call_timeout, from_env.pg_call_timeout, from_flag.pg_call_timeout) == (
            9.0,
            7.5,
            0.25,
        )

    @pytest.mark.parametrize(
        ("flags", "env", "message"),
        [
            ({"store_timeout": "0"}, {},
             r"^setting store_timeout \(flag --store-timeout\) must be a number > 0 \(got '0'\)$"),
            ({"pg_pool_size": "1"}, {},
             r"^setting pg_pool_size \(flag --pg-pool-size\) must be between 2 and 1024"),
            ({}, {"TRIO_BATCH_PG_STATEMENT_TIMEOUT": "-1"},
             r"^setting pg_statement_timeout \(environment variable TRIO_BATCH_PG_STATEMENT_"
             r"TIMEOUT\) must be a number of seconds >= 0"),
            ({"pg_call_timeout": "0"}, {},
             r"^setting pg_call_timeout \(flag --pg-call-timeout\) must be a number > 0 "
             r"\(got '0'\)$"),
            ({}, {"TRIO_BATCH_PG_CALL_TIMEOUT": "inf"},
             r"^setting pg_call_timeout \(environment variable TRIO_BATCH_PG_CALL_TIMEOUT\) "
             r"must be a number > 0 \(got 'inf'\)$"),
            ({"pg_heartbeat": "nan"}, {},
             r"^setting pg_heartbeat \(flag --pg-heartbeat\) must be a number of seconds >= 0"),
            ({"pg_schema": "Trio-Batch"}, {},
             r"^setting pg_schema \(flag --pg-schema\) must be a lower-case SQL identifier"),
            ({"pg_heartbeat": "30"}, {},
             r"^setting pg_heartbeat \(flag --pg-heartbeat\) must be less than "
             r"pg_instance_timeout \(30\) \(got 30\)$"),
            ({"pg_instance_timeout": "6"}, {"TRIO_BATCH_PG_HEARTBEAT": "6"},
             r"^setting pg_heartbeat \(environment variable TRIO_BATCH_PG_HEARTBEAT\) must be "
             r"less than pg_instance_timeout \(6\) \(got 6\)$"),
        ],
    )  # fmt: skip
    def test_invalid_values_name_the_setting_and_its_source(
        self, flags: dict[str, str], env: dict[str, str], message: str
    ) -> None:
        """An invalid store setting stops start-up with its name and where it came from."""
        with pytest.raises(SettingsError, match=message):
            load_settings(flags, environ=env)

    def test_help_lists_them(self) -> None:
        """`trio-batch serve --help` shows a flag for each, with its variable."""
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        text = sub.choices["serve"].format_help()

        for name in STORE_SETTINGS:
            assert flag(name) in text
            assert "TRIO_BATCH_" + name.upper() in text

    def test_docs_list_every_setting(self) -> None:
        """docs/http.md's settings table has a row for every setting of serve."""
        page = (ROOT / "docs" / "http.md").read_text(encoding="utf-8")
        rows = set(re.findall(r"^\| `(\w+)` \|", page, flags=re.MULTILINE))

        assert {s.name for s in SPECS} - rows == set()


class TestStatementTimeout:
    def test_added_to_the_options_of_the_dsn(self) -> None:
        """The timeout joins the DSN's own options, in milliseconds; 0 leaves the DSN alone."""
        pytest.importorskip("psycopg")
        dsn = "postgresql://u:pw@db.internal:5433/jobs?options=-c%20work_mem%3D8MB"

        with_timeout = with_statement_timeout(dsn, 2.5)

        assert with_statement_timeout(dsn, 0) == dsn
        assert "options='-c work_mem=8MB -c statement_timeout=2500'" in with_timeout
        assert {"user=u", "password=pw", "host=db.internal", "port=5433", "dbname=jobs"} <= set(
            with_timeout.split()
        )

    def test_a_dsn_it_cannot_read_is_a_store_error_without_the_dsn(self) -> None:
        """A malformed DSN fails start-up with StoreError, and the password is not repeated."""
        pytest.importorskip("psycopg")

        with pytest.raises(StoreError, match=r"^--db is not a valid PostgreSQL DSN") as info:
            with_statement_timeout("postgresql://u:secret@h/db?nonsense=1", 1)
        assert "secret" not in str(info.value)


class TestOpenStore:
    async def test_defaults_match_postgres_store(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With no pg_* setting, PostgresStore.open gets its own defaults and the DSN as is."""
        pytest.importorskip("psycopg")
        from trio_batch.stores import PostgresStore

        defaults = inspect.signature(PostgresStore.open).parameters
        seen: dict[str, object] = {}

        @contextlib.asynccontextmanager
        async def fake_open(dsn: str, **kwargs: object) -> AsyncIterator[object]:
            seen.update(kwargs, dsn=dsn)
            yield "a store"

        monkeypatch.setattr(PostgresStore, "open", fake_open)
        async with open_store(Settings(db="postgresql://batch@db.internal/batch")):
            pass

        assert seen == {
            "dsn": "postgresql://batch@db.internal/batch",
            "instance_timeout": 30.0,
            "heartbeat": None,
            "pool_size": 4,
            "schema": "trio_batch",
            "call_timeout": 30.0,
            "connect_timeout": 10.0,
            "claim_timeout": 10.0,
            "synchronous_commit": True,
        }
        assert {k: defaults[k].default for k in seen if k not in ("dsn", "heartbeat")} == {
            k: v for k, v in seen.items() if k not in ("dsn", "heartbeat")
        }

    async def test_passes_the_pg_settings_when_set(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Set pg_* settings reach PostgresStore.open; the statement timeout goes in the DSN."""
        pytest.importorskip("psycopg")
        from trio_batch.stores import PostgresStore

        seen: dict[str, object] = {}

        @contextlib.asynccontextmanager
        async def fake_open(dsn: str, **kwargs: object) -> AsyncIterator[object]:
            seen.update(kwargs, dsn=dsn)
            yield "a store"

        monkeypatch.setattr(PostgresStore, "open", fake_open)
        settings = Settings(
            db="postgresql://batch@db.internal/batch",
            pg_instance_timeout=12.0,
            pg_heartbeat=3.0,
            pg_pool_size=6,
            pg_statement_timeout=1.5,
            pg_call_timeout=2.0,
            pg_connect_timeout=4.0,
            pg_claim_timeout=3.0,
            pg_synchronous_commit=False,
            pg_schema="blue",
        )
        async with open_store(settings):
            pass

        assert seen == {
            "dsn": "user=batch dbname=batch host=db.internal options='-c statement_timeout=1500'",
            "instance_timeout": 12.0,
            "heartbeat": 3.0,
            "pool_size": 6,
            "schema": "blue",
            "call_timeout": 2.0,
            "connect_timeout": 4.0,
            "claim_timeout": 3.0,
            "synchronous_commit": False,
        }
