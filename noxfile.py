"""Every check of the project, one session each: ``nox -l`` lists them."""

from __future__ import annotations

import os
import shutil

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")
EXTRAS = "all"


@nox.session
def tests(session: nox.Session) -> None:
    """Run the whole test suite, slow tests included, against the package with every extra.

    Plain ``pytest`` deselects the tests marked ``slow`` (state machines, the API fuzz, the bench
    harness, subprocess and real-server runs); this session selects them all. ``-- -k name``
    filters; ``-- -m "not slow"`` gives the quick run.
    """
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run(
        "pytest",
        "-m",
        "slow or not slow",
        *session.posargs,
        env={"HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "default")},
    )


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff: the lint rules (ASYNC included) and the formatting."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src and tests."""
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "typecheck"))
    session.run("mypy", *session.posargs)


@nox.session(default=False)
def api_fuzz(session: nox.Session) -> None:
    """Schemathesis ``--checks all`` against a real ``trio-batch serve``, seeded, offline.

    The server (SQLite, the web fetcher) and Schemathesis run inside ``unshare -n``: a network
    namespace with loopback alone, so no generated URL can leave the machine (a fetch of one
    answers its documented 502). Needs root, or a user namespace that grants one (CI runs as
    root). Passes with no 5xx but those documented, no answer outside the OpenAPI document and
    every input it allows accepted (``tests/http/api_fuzz.toml`` says where a pass means more).
    TRIO_BATCH_FUZZ_EXAMPLES (default 200: about a minute) sets the cases per operation; the
    seed is fixed, so a run is repeatable. ``-- -s`` shows Schemathesis' report as it runs.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        session.error("unshare (util-linux) is not installed: api_fuzz needs a network namespace")
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "test", "fuzz"))
    session.run(
        unshare,
        "-n",
        "--",
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-m",
        "slow or not slow",
        "tests/http/test_fuzz.py::test_checks_all_against_serve_in_a_network_namespace",
        "-rP",
        *session.posargs,
        env={"TRIO_BATCH_FUZZ_EXAMPLES": os.environ.get("TRIO_BATCH_FUZZ_EXAMPLES", "200")},
        external=True,
    )


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks W1-W5 beside the bare baseline, and W6 (followers); ``-- --quick`` is short.

    W6 is what a follower of one job costs (200 followers, NDJSON follow and SSE events: RSS,
    heap and CPU per follower). Prints a table and writes bench/results/latest.{json,md,png}.
    ``-- --pg DSN`` (or TRIO_BATCH_TEST_PG) adds the PostgresStore rows; ``-- --only W1,W6``
    picks workloads.
    """
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "bench"))
    session.run("python", "-m", "bench.run", *session.posargs)


@nox.session(default=False)
def bench_peers(session: nox.Session) -> None:
    """W1 and W2 on SAQ (Redis) and procrastinate (PostgreSQL) beside trio-batch, as ratios.

    Needs Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (database ``test``); stops
    with a message naming what is not listening. Writes bench/results/peers.json.
    """
    import socket

    for name, port in (("Redis", 6379), ("PostgreSQL", 5432)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            session.error(
                f"{name} is not listening on 127.0.0.1:{port}; start it, then run "
                "nox -s bench_peers again (nothing was measured)"
            )
    session.install(
        "-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "bench", "peers")
    )
    session.run("python", "-m", "bench.peers", *session.posargs)


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """Build the documentation site with warnings as errors, then run its code samples.

    ``mkdocs build --strict`` into ``site/`` (``-- --site-dir DIR`` to put it elsewhere; the
    arguments go to mkdocs): a warning, a broken link or a raw reST role (``:class:`X```) on a
    page fails it. Then ``tests/cli/test_docs.py``: every Python sample of the pages runs as
    written. It changes no tracked file: ``nox -s pictures`` redraws the timeline picture.
    """
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "docs", "test"))
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})
    session.run("pytest", "tests/cli/test_docs.py", "-q", "-p", "no:cacheprovider")


@nox.session(default=False)
def pictures(session: nox.Session) -> None:
    """Redraw docs/timeline.svg from a real ``trio-batch demo`` run (about ten seconds, offline).

    A real run's timings differ each time, so the picture is redrawn on purpose (commit it
    when the demo or the drawing changes), not by every docs build.
    """
    session.install("-e", f".[{EXTRAS}]")
    db = os.path.join(session.create_tmp(), "timeline-demo.sqlite")
    for stale in (db, db + "-wal", db + "-shm", db + "-lock"):
        if os.path.exists(stale):
            os.remove(stale)
    session.run(
        "trio-batch", "demo", "--db", db, "--timeline", "docs/timeline.svg", "--progress", "off"
    )
