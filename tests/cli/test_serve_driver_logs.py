"""``trio-batch serve`` logs the database driver's records in its own format, naming no host."""

from __future__ import annotations

import logging
import re
import socket
from typing import TYPE_CHECKING

import pytest
import trio

from tests.support import CLEAN_ENV
from trio_batch._cli._serve import _DriverFormatter, _setup_logging

from .support import CLI

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: \S.*$"
)


class _Connection:
    """Stands in for a driver object whose repr names the host, as a psycopg connection's does."""

    def __repr__(self) -> str:
        return "<psycopg.Connection [IDLE] (host=db.internal port=5999 user=u) at 0x1>"


def _record(name: str, msg: str, *args: object, exc: BaseException | None = None) -> str:
    record = logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)
    if exc is not None:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    return _DriverFormatter("%(levelname)s %(name)s: %(message)s").format(record)


class _Collect(logging.Handler):
    """A handler on the root logger, to see whether a record propagated there."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def fresh_loggers() -> Iterator[None]:
    """The ``trio_batch`` and ``psycopg`` loggers as they were, after the test."""
    saved = [
        (lg, list(lg.handlers), lg.level, lg.propagate)
        for lg in (logging.getLogger("trio_batch"), logging.getLogger("psycopg"))
    ]
    for lg, *_ in saved:
        lg.handlers.clear()
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


class TestDriverFormatter:
    def test_the_message_is_cut_at_the_first_colon_and_keeps_the_pool_name(self) -> None:
        """'error connecting' keeps our pool's name and drops the driver's error (host, port)."""
        error = 'connection failed: connection to server at "127.0.0.1", port 5999 failed'

        line = _record("psycopg.pool", "error connecting in %r: %s", "trio-batch-x", error)

        assert "WARNING psycopg.pool: error connecting in 'trio-batch-x'" == line

    def test_an_object_before_the_colon_shows_as_its_class_name(self) -> None:
        """A connection's repr (which names the host) shows only as its class name."""
        line = _record("psycopg", "error ignored in rollback on %s: %s", _Connection(), "lost")

        assert "WARNING psycopg: error ignored in rollback on <_Connection>" == line

    def test_other_strings_are_hidden_and_numbers_kept(self) -> None:
        """A string argument that is not our pool's name could be a host, so it is hidden."""
        line = _record("psycopg.pool", "pool %r gave up after %s sec", "db.internal", 10.0)

        assert "WARNING psycopg.pool: pool ... gave up after 10.0 sec" == line

    def test_a_traceback_is_left_out(self) -> None:
        """A record with an exception prints one line, without the exception's message."""
        try:
            raise OSError("connection to server at db.internal failed")
        except OSError as exc:
            line = _record("psycopg", "error in notice receiver: %s", exc, exc=exc)

        assert "WARNING psycopg: error in notice receiver" == line

    def test_a_template_that_does_not_fit_its_arguments_still_names_no_value(self) -> None:
        """Too few arguments for the template: the placeholders show as '...'."""
        line = _record("psycopg", "lost %s and %d%%: %s", "db.internal")

        assert "WARNING psycopg: lost ... and ...%" == line


class TestSetupLogging:
    @pytest.mark.usefixtures("fresh_loggers")
    def test_a_driver_record_is_printed_once_in_serve_format(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A psycopg.pool warning reaches serve's stderr once and never the root logger."""
        root_handler = _Collect()
        logging.getLogger().addHandler(root_handler)
        try:
            _setup_logging("info")
            logging.getLogger("psycopg.pool").info("growing pool %r", "trio-batch-x")
            logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "p", "h")
        finally:
            logging.getLogger().removeHandler(root_handler)
        lines = capsys.readouterr().err.splitlines()

        assert [] == root_handler.records
        assert 1 == len(lines)
        assert LINE.match(lines[0])
        assert lines[0].endswith(" WARNING psycopg.pool: error connecting in ...")

    @pytest.mark.usefixtures("fresh_loggers")
    def test_log_level_error_hides_driver_warnings(self) -> None:
        """--log-level error raises the driver's level too; debug leaves it at WARNING."""
        _setup_logging("error")
        hidden = logging.getLogger("psycopg.pool").isEnabledFor(logging.WARNING)
        _setup_logging("debug")
        info = logging.getLogger("psycopg.pool").isEnabledFor(logging.INFO)
        handlers = len(logging.getLogger("psycopg").handlers)

        assert (False, False, 1) == (hidden, info, handlers)


@pytest.mark.slow
async def test_serve_on_a_closed_postgres_port_logs_no_host(tmp_path: Path) -> None:
    """Serve on a PostgreSQL port nobody listens on: every stderr line is in serve's format
    (or is the final message), none names the host, the port or the DSN, and it exits 2."""
    pytest.importorskip("hypercorn")
    pytest.importorskip("psycopg_pool")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before serve connects
    await trio.run_process(
        [*CLI, "keys", "add", "alice", "--keys", "keys.toml"],
        cwd=tmp_path,
        env=CLEAN_ENV,
        capture_stdout=True,
        capture_stderr=True,
    )
    dsn = f"postgresql://postgres@127.0.0.1:{port}/x"
    done = await trio.run_process(
        [*CLI, "serve", "--keys", "keys.toml", "--port", "0", "--db", dsn],
        cwd=tmp_path,
        env=CLEAN_ENV,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    *logs, final = done.stderr.decode().splitlines()

    assert 2 == done.returncode
    assert (
        "trio-batch serve: could not connect to PostgreSQL within 10 s: check that the server "
        "runs, that the DSN is right, and that this user may connect"
    ) == final
    assert [] == [line for line in logs if not LINE.match(line)]
    assert [] == [
        line
        for line in done.stderr.decode().splitlines()
        if any(s in line for s in ("127.0.0.1", str(port), "postgresql://"))
    ]
    assert any(" WARNING psycopg.pool: error connecting in 'trio-batch-" in line for line in logs)
