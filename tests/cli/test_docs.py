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


@pytest.mark.parametrize("command", ["run", "status", "results", "demo", "map", "retry", "crawl"])
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


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|<((?![a-z]+://)[^>\s]+\.md(?:#[^>\s]*)?)>")
CODE = re.compile(r"^```.*?^```[ \t]*$|`[^`\n]*`", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub (and MkDocs' toc with the same slugs) makes it: lower case,
    without punctuation but ``-`` and ``_``, spaces as ``-``."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``'s headings, a repeated one numbered as GitHub numbers it."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = re.sub(r"^```.*?^```[ \t]*$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    for heading in HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """The links of ``page`` to files of this tree (not to the web), outside code."""
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    links = [a or b for a, b in LINK.findall(text)]
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:", link)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_points_at_a_file_and_an_anchor_that_exist(page: Path) -> None:
    """No dead link on GitHub: each relative link of the README and docs/ names a file of the
    tree, and its #anchor, if any, a heading of that file."""
    dead = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            dead.append(f"{link} (no file {path})")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            dead.append(f"{link} (no heading #{anchor} in {target.name})")

    assert [] == dead


def test_the_link_check_reads_links_and_anchors_as_github_does() -> None:
    """The check finds a page's links and makes a heading's anchor as GitHub makes it."""
    page = ROOT / "docs" / "cli.md"

    assert "trio-batch-status-and-results" == slug("`trio-batch status` and `results`")
    assert "rendered-pages-render-and-wait_for" == slug("Rendered pages (`render` and `wait_for`)")
    assert "#trio-batch-run" in relative_links(page)
    assert "trio-batch-retry" in anchors(page)


FIRST_SCREEN = 50
"""Lines of the README a newcomer reads before scrolling."""


def test_the_readmes_first_screen_shows_the_fetcher_and_keeps_the_ci_commands() -> None:
    """The README's first screen has the two commands `.ci/run` runs, as written there (the
    demo, and the tests), and an example of each thing the fetcher does for an agent."""
    first = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN])
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    shown = {
        "formats": "--formats markdown,links,metadata",
        "map": "trio-batch map https://",
        "robots": "--robots",
        "render": "--render",
        "headers": '--header "',
        "PDF": '"pages": "1-3"',
        "MCP": "trio-batch mcp",
    }

    for command in ("pip install '.[all]' && trio-batch demo", "pip install nox && nox -s tests"):
        assert f"\n{command}\n" in first and f"\n{command}\n" in ci
    assert {name: text for name, text in shown.items() if text not in first} == {}
