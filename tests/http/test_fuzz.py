"""schemathesis against the served OpenAPI document: no 5xx, every response matches the schema.

Two runs. The normal suite runs a short, seeded one against an app in this process (a scripted
fetch, a memory store: a few seconds). ``nox -s api_fuzz`` runs ``--checks all`` against a
real ``trio-batch serve`` (SQLite, the web fetcher) with a fixed seed, inside a network
namespace that has only loopback (``unshare -n``), so no generated URL can leave the machine;
its test skips itself anywhere else. ``tests/http/api_fuzz.toml`` says what a pass means where
the defaults of ``--checks all`` do not fit (the documented 502/503 of a fetch that cannot
reach its site, and why). ``TRIO_BATCH_FUZZ_EXAMPLES`` (cases per operation) makes either
bigger, ``TRIO_BATCH_FUZZ_SECONDS`` bounds the in-process one by time instead of its seed, and
``TRIO_BATCH_FUZZ_PHASES`` picks its phases.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import trio_batch
from trio_batch import Config, open_engine
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

from .support import ALICE_KEY, make_keys

pytest.importorskip("schemathesis")

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    ]
)


def _schemathesis() -> list[str]:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if found is None:
        found = shutil.which("schemathesis")
    if found is None:
        pytest.skip("the schemathesis command is not installed (dependency group fuzz)")
    return [found]


@pytest.mark.slow
class TestFuzz:
    async def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(
        self, tmp_path: Path
    ) -> None:
        """Generated requests (valid and invalid) never get a 5xx or an undocumented answer."""
        examples = os.environ.get("TRIO_BATCH_FUZZ_EXAMPLES", "4")
        seconds = os.environ.get("TRIO_BATCH_FUZZ_SECONDS", "")
        phases = os.environ.get("TRIO_BATCH_FUZZ_PHASES", "examples,fuzzing,stateful")
        # Caps high enough that generated traffic never meets 503 Busy: that answer is
        # documented, but the check forbids every 5xx.
        config = Config(jobs_per_caller=10_000, jobs_total=10_000, targets_per_job=64)
        shutdown = trio.Event()
        async with open_engine(MemoryStore(), ScriptedFetch(), config) as engine:
            app = create_app(engine, make_keys(), fetch=ScriptedFetch(), access_log_enabled=False)
            async with trio.open_nursery() as nursery:
                port: int = await nursery.start(
                    lambda task_status: serve(
                        app, port=0, shutdown_trigger=shutdown.wait, task_status=task_status
                    )
                )
                cmd = [
                    *_schemathesis(),
                    "run",
                    f"http://127.0.0.1:{port}/openapi.json",
                    "--checks",
                    CHECKS,
                    "--phases",
                    phases,
                    "--max-examples",
                    examples,
                    "--header",
                    f"Authorization: Bearer {ALICE_KEY}",
                    "--workers",
                    "1",
                    "--no-color",
                    "--suppress-health-check",
                    "all",
                ]
                if seconds:
                    cmd += ["--max-time", seconds]
                else:
                    cmd += ["--seed", "1", "--generation-database", "none"]
                result = await trio.run_process(
                    cmd,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    cwd=tmp_path,
                )
                shutdown.set()
        output = (result.stdout + result.stderr).decode(errors="replace")

        print(output)
        assert result.returncode == 0, output


CONFIG = Path(__file__).with_name("api_fuzz.toml")
PORT = 18511
"""serve's port in the namespace (nothing else listens there)."""
_CLI = [sys.executable, "-c", "import sys; from trio_batch._cli import entry; sys.exit(entry())"]


def _alone_on_loopback() -> bool:
    """Whether this process is in a network namespace whose only interface is loopback."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def _env() -> dict[str, str]:
    """This process's environment, the package under test first on the path (a relative
    ``PYTHONPATH=src`` would not reach it from the run's directory)."""
    here = str(Path(trio_batch.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": here if not path else f"{here}{os.pathsep}{path}"}


def _cli(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [*_CLI, *args], cwd=cwd, capture_output=True, text=True, check=True, env=_env()
    )
    return done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def _serving(cwd: Path) -> Iterator[str]:
    """``trio-batch serve`` on 127.0.0.1:PORT with a caller who has a webhook secret (so a
    generated webhook is accepted); yields the caller's key. Caps are raised so generated
    traffic never meets 429/503 Busy, and a host that cannot be reached fails its targets
    within a second (``--host-block-limit``), so a followed job ends soon."""
    key = _cli("keys", "add", "fuzz", "--keys", "keys.toml", cwd=cwd)
    _cli("keys", "secret", "fuzz", "--keys", "keys.toml", cwd=cwd)
    log = (cwd / "serve.log").open("w")
    server = subprocess.Popen(
        [
            *_CLI,
            "serve",
            "--db",
            "fuzz.sqlite",
            "--keys",
            "keys.toml",
            "--port",
            str(PORT),
            "--jobs-per-caller",
            "10000",
            "--jobs-total",
            "10000",
            "--targets-per-job",
            "8",
            "--host-block-limit",
            "1",
            "--retry-wait",
            "0.2",
        ],
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    try:
        for _ in range(300):  # up to 30 s to start
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", PORT), timeout=0.1).close()
                break
            if server.poll() is not None:
                raise AssertionError("serve stopped: " + (cwd / "serve.log").read_text())
            time.sleep(0.1)
        yield key
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    not _alone_on_loopback(),
    reason="runs only in a network namespace with loopback alone: nox -s api_fuzz",
)
def test_checks_all_against_serve_in_a_network_namespace(tmp_path: Path) -> None:
    """Every check of schemathesis, seeded, against a real serve: no 5xx but a fetch's
    documented 502/503, no answer outside the document, every documented input accepted."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    examples = os.environ.get("TRIO_BATCH_FUZZ_EXAMPLES", "100")
    with _serving(tmp_path) as key:
        result = subprocess.run(
            [
                *_schemathesis(),
                "--config-file",
                str(CONFIG),
                "run",
                f"http://127.0.0.1:{PORT}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "use_after_free",  # DELETE cancels, the job stays readable (api_fuzz.toml)
                "--seed",
                "1",
                "--generation-database",
                "none",
                "--max-examples",
                examples,
                "--workers",
                "1",
                "--request-timeout",
                "30",
                "--header",
                f"Authorization: Bearer {key}",
                "--no-color",
                "--suppress-health-check",
                "all",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
    output = result.stdout + result.stderr
    print(output)
    assert result.returncode == 0, output
