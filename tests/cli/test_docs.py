"""The Python samples of the documentation run as written (``nox -s docs`` runs these too).

Every fenced ``python`` block of ``docs/*.md`` and ``README.md`` is a complete program: it is run
in a fresh namespace, in a temporary directory, as ``__main__``. A block that cannot run offline
(it needs a real network or a database server) is marked by the line
``<!-- docs-test: skip -->`` right before its fence, and says so in its text.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from trio_batch._cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SKIP = "<!-- docs-test: skip -->"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
NOT_SAMPLES = {"spec.md"}  # the SPEC's blocks are API sketches, not programs


@dataclass(frozen=True)
class Sample:
    page: str
    line: int
    code: str


def find_samples() -> list[Sample]:
    pages = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in NOT_SAMPLES)
    found: list[Sample] = []
    for page in [*pages, ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
            if before.strip() == SKIP:
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.append(Sample(str(page.relative_to(ROOT)), line, match.group(1)))
    return found


SAMPLES = find_samples()


def test_the_docs_have_samples() -> None:
    """The pages this suite owns keep their runnable samples."""
    pages = {s.page for s in SAMPLES}

    assert {"docs/index.md", "docs/tutorial.md", "docs/fetchfunc.md"} <= pages


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.page}:{s.line}" for s in SAMPLES])
def test_sample_runs(
    sample: Sample,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The sample runs to completion without an error or a warning."""
    monkeypatch.chdir(tmp_path)
    code = compile(sample.code, f"{sample.page}:{sample.line}", "exec")

    exec(code, {"__name__": "__main__"})


@pytest.mark.parametrize("command", ["run", "status", "results", "demo"])
def test_the_cli_reference_lists_every_option(command: str) -> None:
    """docs/cli.md names every visible option of the commands it documents."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {
        max(action.option_strings, key=len)
        for action in sub.choices[command]._actions
        if action.option_strings
        and action.help not in (argparse.SUPPRESS, None)
        and "--help" not in action.option_strings
    }
    reference = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")

    assert {o for o in options if f"`{o}" not in reference} == set()
