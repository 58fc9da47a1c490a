"""schemathesis against the served OpenAPI document: no 5xx, every response matches the schema.

The normal suite runs a short, seeded version (a few seconds). ``nox -s fuzz_api`` runs it long:
``TRIO_BATCH_FUZZ_EXAMPLES`` (cases per operation) and ``TRIO_BATCH_FUZZ_SECONDS`` (time
budget) make it bigger, ``TRIO_BATCH_FUZZ_PHASES`` picks the phases.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import trio

from trio_batch import Config, open_engine
from trio_batch.http import create_app, serve
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch

from .support import ALICE, make_keys

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
                    f"Authorization: Bearer {ALICE}",
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
