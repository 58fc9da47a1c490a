"""PAGES: ~300 real pages through ``trio-batch run``, raw, text and Markdown in one run (issue 28).

The corpus is built from Debian's documentation packages (``apt-get download`` and
``dpkg-deb -x``, nothing installed), as in ``shared/findings/real-pages-perf.md``, and cached
outside the repository (``$TRIO_BATCH_BENCH_CACHE``, else ``~/.cache/trio-batch-bench``);
without ``apt-get`` or the network the workload is skipped with a note. The pages are served by
``python -m http.server`` on 127.0.0.1 (HTTP/1.0: one connection a request), and each repeat
runs the three modes one after another, so a neighbour's load falls on all three alike.

Each run starts once the machine has been quiet for a second (60 s at most). For each run:
pages/s (wall), CPU per page (the CLI and its shaping workers, from ``wait4`` of the CLI and of
the fork server it leaves to this process: ``_harness.adopt_orphans``),
the CPU that other processes used meanwhile (``/proc/stat`` less ours), and the time to the
first result line. Then, in this process, the paragraph recall of text and Markdown (the share
of the pages' ``<p>`` of 60 characters or more whose first 60 letters and digits appear in the
output) and how many pages give the same output as a previous extractor, read from git
(``PREVIOUS``, the last on ``html.parser``, or ``--previous COMMIT``).

Run ``python -m bench.real_pages [--quick]`` alone, or ``python -m bench.run --only PAGES``;
``--checks-only`` skips the runs and measures only recall and sameness, in this process.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ._harness import HERE, Figure, adopt_orphans, children_of, log, reap_orphans

PACKAGES = (
    "python3.11-doc",
    "nodejs-doc",
    "valgrind",
    "libxslt1-dev",
    "libffi-dev",
    "socat",
    "shared-mime-info",
)
DOC = Path("usr/share/doc")
GROUPS: tuple[tuple[str, int], ...] = (
    ("python3.11/html/library", 110),
    ("python3.11/html/howto", 20),
    ("python3.11/html/tutorial", 17),
    ("python3.11/html/reference", 11),
    ("python3.11/html/c-api", 10),
    ("python3.11/html/faq", 9),
    ("python3.11/html/whatsnew", 4),
    ("nodejs/api", 50),
    ("valgrind/html", 30),
    ("libxslt1-dev", 25),
    ("libffi8/html", 10),
    ("socat", 5),
)
"""Where the pages come from and how many of each, evenly spaced in name order (Node's
``all.html``, 5.85 MB, always among them); plus shared-mime-info's spec, through a redirect."""
REDIRECTED = "shared-mime-info/shared-mime-info-spec.html"
PREVIOUS = "d55ab8b"
"""The last commit whose extractor ran on ``html.parser`` (before issue 28)."""
MODES = ("raw", "text", "markdown")
_WORD = re.compile(r"[^\W_]+")
_LINK_TARGET = re.compile(r"\]\((?:[^()]|\([^()]*\))*\)")


def cache_dir() -> Path:
    return Path(os.environ.get("TRIO_BATCH_BENCH_CACHE", Path.home() / ".cache/trio-batch-bench"))


# -- the corpus -----------------------------------------------------------------------------------


def build_corpus(cache: Path) -> tuple[Path, list[str]] | str:
    """The extracted packages' root and the picked pages (paths under it), or why not."""
    root = cache / "root"
    if not (root / DOC / "python3.11").is_dir():
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            return "PAGES skipped: apt-get and dpkg-deb are needed to build the corpus"
        debs = cache / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        got = subprocess.run(
            ["apt-get", "download", *PACKAGES], cwd=debs, capture_output=True, text=True
        )
        if got.returncode != 0:
            return f"PAGES skipped: apt-get download failed ({got.stderr.strip()[-200:]})"
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    picked: list[str] = []
    for group, count in GROUPS:
        files = sorted(p for p in (root / DOC / group).rglob("*.html") if p.is_file())
        first: list[Path] = []
        if group == "nodejs/api":
            first = [root / DOC / group / "all.html"]
            files.remove(first[0])
            count -= 1
        step = len(files) / count
        picked += [str(p.relative_to(root / DOC)) for p in first]
        picked += [str(files[int(i * step)].relative_to(root / DOC)) for i in range(count)]
    picked.append(REDIRECTED)  # a directory: http.server answers 301, then its index.html
    return root / DOC, picked


# -- end to end -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _busy_ticks() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    idle = int(fields[3]) + int(fields[4])
    return sum(int(f) for f in fields[:8]) - idle


def wait_quiet(most: float = 60.0) -> float:
    """Wait (``most`` seconds at most) until the machine has been quiet for a second (under a
    tenth of a core busy), as the findings' gated runs did; the seconds waited."""
    tick = os.sysconf("SC_CLK_TCK")
    start = time.perf_counter()
    while time.perf_counter() - start < most:
        busy = _busy_ticks()
        time.sleep(1.0)
        if (_busy_ticks() - busy) / tick < 0.1:
            break
    return time.perf_counter() - start


def _cli() -> list[str]:
    found = shutil.which("trio-batch", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "trio_batch._cli"]


def run_cli(inputs: Path, workdir: Path, label: str, quiet: float = 60.0) -> dict[str, float]:
    """One ``trio-batch run`` over ``inputs``: wall, CPU, other CPU, time to first line."""
    out = workdir / f"{label}.jsonl"
    cmd = [
        *_cli(),
        "run",
        str(inputs),
        "--allow-net",
        "127.0.0.0/8",
        "--progress",
        "off",
        "--db",
        str(workdir / f"{label}.sqlite"),
        "--out",
        str(out),
    ]
    tick = os.sysconf("SC_CLK_TCK")
    waited = wait_quiet(quiet)
    adopt_orphans()
    keep = children_of(os.getpid())
    busy = _busy_ticks()
    start = time.perf_counter()
    with (workdir / f"{label}.stderr").open("wb") as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors)
    first = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # the CLI and its workers' CPU
        if pid:
            break
        if first is None and out.exists() and out.stat().st_size:
            first = time.perf_counter() - start
        time.sleep(0.005)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    orphans_cpu, _ = reap_orphans(keep)  # the fork server and its shaping workers
    cpu = usage.ru_utime + usage.ru_stime + orphans_cpu
    other = max((_busy_ticks() - busy) / tick - cpu, 0.0)
    lines = out.read_text().splitlines() if out.exists() else []
    done = sum(1 for line in lines if json.loads(line).get("status") == "done")
    if proc.returncode:
        log(f"PAGES {label}: trio-batch run exited {proc.returncode}")
    return {
        "wall": wall,
        "cpu": cpu,
        "other": other,
        "first": first or wall,
        "done": done,
        "waited": waited,
    }


def end_to_end(
    base: Path, pages: Sequence[str], repeats: int, workdir: Path, quiet: float = 60.0
) -> dict[str, list[dict[str, float]]]:
    """``repeats`` rounds of raw, text and Markdown, in turn, against a local http.server."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=base,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        inputs = {}
        for mode in MODES:
            path = workdir / f"{mode}.jsonl"
            path.write_text(
                "".join(
                    json.dumps({"url": f"http://127.0.0.1:{port}/{p}", "options": {"mode": mode}})
                    + "\n"
                    for p in pages
                )
            )
            inputs[mode] = path
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for rep in range(repeats):
            for mode in MODES:
                run = run_cli(inputs[mode], workdir, f"{mode}-{rep}", quiet)
                runs[mode].append(run)
                log(
                    f"PAGES {mode:8} {len(pages) / run['wall']:6.1f} pages/s "
                    f"{run['cpu'] / len(pages) * 1e3:5.1f} ms CPU/page, first line "
                    f"{run['first']:.2f} s, other CPU {run['other']:.1f} s, {run['done']:.0f} done "
                    f"(waited {run['waited']:.0f} s for a quiet machine)"
                )
        return runs
    finally:
        server.terminate()
        server.wait()


# -- recall ---------------------------------------------------------------------------------------


def _letters(text: str) -> str:
    return "".join(_WORD.findall(_LINK_TARGET.sub("]", text))).lower()


def paragraphs(html: str) -> list[str]:
    """The page's ``<p>`` of 60 characters or more: their first 60 letters and digits."""
    from selectolax.lexbor import LexborHTMLParser

    found = []
    for node in LexborHTMLParser(html).css("p"):
        text = " ".join(node.text(deep=True).split())
        if len(text) >= 60:
            found.append(_letters(text)[:60])
    return [p for p in found if p]


Convert = Callable[..., tuple[str, str]]
_EXTRACTOR_DIRS = ("src/trio_batch/web/_extract", "src/trio_batch/web")
"""Where ``_html.py`` (with ``html_to_text``) has lived: its room since dc141c4, before it the
flat ``web/`` folder."""


def previous_extractor(commit: str, root: Path = HERE.parent) -> ModuleType | None:
    """The ``_html`` module of ``commit`` (from git), or None where git cannot give it.

    The files of the folder that held ``_html.py`` at that commit are written to a temporary
    package mounted at the same depth under ``trio_batch`` (``trio_batch.web._previous_N``
    for ``web/_extract/``, ``trio_batch._previous_N`` for ``web/``), so that its relative
    imports resolve to its own siblings, and beyond them to this checkout's modules."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=30
        ).stdout

    for folder in _EXTRACTOR_DIRS:
        try:
            names = git("ls-tree", "--name-only", f"{commit}:{folder}").split()
            if "_html.py" not in names:
                continue
            sources = {
                name: git("show", f"{commit}:{folder}/{name}")
                for name in names
                if name.endswith(".py") and name != "__init__.py"
            }
            break
        except (OSError, subprocess.SubprocessError):
            continue
    else:
        return None
    parent = "trio_batch.web" if folder.endswith("/_extract") else "trio_batch"
    name = f"{parent}._previous_{len(sys.modules)}"
    package = Path(tempfile.mkdtemp(prefix="trio-batch-previous-"))
    for file, source in sources.items():
        (package / file).write_text(source)
    (package / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(f"{name}._html")


def _previous_converter(commit: str) -> Convert | None:
    """``html_to_text`` of ``commit`` (from git), or None where git cannot give it."""
    module = previous_extractor(commit)
    if module is None:
        return None
    convert: Convert = module.html_to_text
    if "main_content" in inspect.signature(convert).parameters:
        # a commit of issue 37 or later: its default is the main content; compare whole pages
        return functools.partial(convert, main_content=False)
    return convert


def quality(base: Path, pages: Sequence[str], previous_commit: str = PREVIOUS) -> dict[str, Any]:
    """Recall of the pages' paragraphs (main content, the default), CPU per page in-process
    (main content and whole page), and sameness of the whole page (``main_content: false``)
    with ``previous_commit``'s extractor, for text and Markdown."""
    from trio_batch.web._extract._html import html_to_text
    from trio_batch.web._extract._shape import Body, decode

    previous = _previous_converter(previous_commit)
    out: dict[str, Any] = {}
    docs = []
    for page in pages:
        path = base / page
        path = path / "index.html" if path.is_dir() else path
        url = f"http://127.0.0.1/{page}"
        docs.append((url, decode(Body(path.read_bytes(), "text/html", None, url), "html")))
    wanted = [paragraphs(html) for _url, html in docs]
    total = sum(len(w) for w in wanted)
    for mode in ("text", "markdown"):
        found = same = 0
        cpu = whole_cpu = previous_cpu = 0.0
        for (url, html), paras in zip(docs, wanted, strict=True):
            start = time.process_time()
            result = html_to_text(html, base_url=url, markdown=mode == "markdown")
            cpu += time.process_time() - start
            letters = _letters(result[0])
            found += sum(1 for p in paras if p in letters)
            start = time.process_time()
            whole = html_to_text(
                html, base_url=url, markdown=mode == "markdown", main_content=False
            )
            whole_cpu += time.process_time() - start
            if previous is not None:
                start = time.process_time()
                before = previous(html, base_url=url, markdown=mode == "markdown")
                previous_cpu += time.process_time() - start
                same += before == whole
        out[mode] = {
            "recall": found / total if total else 1.0,
            "paragraphs": total,
            "cpu_ms": cpu / len(docs) * 1e3,
            "whole_page_cpu_ms": whole_cpu / len(docs) * 1e3,
            **(
                {"same_as_previous": same, "previous_cpu_ms": previous_cpu / len(docs) * 1e3}
                if previous is not None
                else {}
            ),
        }
        log(f"PAGES {mode:8} recall {out[mode]['recall']:.4f} of {total} paragraphs; {out[mode]}")
    return out


# -- figures --------------------------------------------------------------------------------------


def run_pages(mode: str, previous: str = PREVIOUS) -> tuple[list[Figure], list[str]]:
    """The PAGES figures for ``bench.run`` (``mode``: full, quick or tiny), and notes;
    sameness is with ``previous``'s extractor."""
    if mode == "tiny":
        return [], ["PAGES is not run in a tiny run (it builds a corpus of Debian pages)"]
    built = build_corpus(cache_dir())
    if isinstance(built, str):
        log(built)
        return [], [built]
    base, pages = built
    repeats = 3 if mode == "full" else 1
    if mode != "full":
        pages = pages[::5]
    with tempfile.TemporaryDirectory(prefix="trio-batch-pages-") as work:
        runs = end_to_end(base, pages, repeats, Path(work), 60.0 if mode == "full" else 10.0)
    checked = quality(base, pages, previous)
    return figures(runs, checked, len(pages), previous), []


def figures(
    runs: dict[str, list[dict[str, float]]],
    checked: dict[str, Any],
    n: int,
    previous: str = PREVIOUS,
) -> list[Figure]:
    out = []
    extra: dict[str, Any] = {"pages": n}
    for mode, mode_runs in runs.items():
        rates = [n / r["wall"] for r in mode_runs]
        run_extra = {**extra, "other_cpu_s": [r["other"] for r in mode_runs]}
        out.append(Figure("PAGES", "sqlite", mode, "throughput", "pages/s", rates, True, run_extra))
        out.append(
            Figure(
                "PAGES",
                "sqlite",
                mode,
                "CPU per page",
                "ms",
                [r["cpu"] / n * 1e3 for r in mode_runs],
                False,
                extra,
            )
        )
        out.append(
            Figure(
                "PAGES",
                "sqlite",
                mode,
                "first result line",
                "s",
                [r["first"] for r in mode_runs],
                False,
                extra,
            )
        )
    raw = [n / r["wall"] for r in runs["raw"]]
    for mode in ("text", "markdown"):
        ratios = [n / r["wall"] / base for r, base in zip(runs[mode], raw, strict=True)]
        out.append(Figure("PAGES", "sqlite", mode, "pages/s over raw", "x", ratios, True, extra))
        out.append(
            Figure(
                "PAGES",
                "none",
                mode,
                "paragraph recall",
                "share",
                [checked[mode]["recall"]],
                True,
                {"paragraphs": checked[mode]["paragraphs"]},
            )
        )
        if "same_as_previous" in checked[mode]:
            out.append(
                Figure(
                    "PAGES",
                    "none",
                    mode,
                    "pages as the previous extractor",
                    "share",
                    [checked[mode]["same_as_previous"] / n],
                    True,
                    {"previous": previous},
                )
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.real_pages", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a fifth of the pages, one round")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--previous",
        default=PREVIOUS,
        metavar="COMMIT",
        help=f"the extractor to compare the output with, read from git (default {PREVIOUS})",
    )
    parser.add_argument(
        "--checks-only",
        action="store_true",
        help="no trio-batch runs: only recall and sameness, in this process",
    )
    args = parser.parse_args(argv)
    if args.checks_only:
        built = build_corpus(cache_dir())
        if isinstance(built, str):
            print(built)
            return 1
        base, pages = built
        checked = quality(base, pages[::5] if args.quick else pages, args.previous)
        print(json.dumps(checked, indent=1))
        return 0
    found, notes = run_pages("quick" if args.quick else "full", args.previous)
    for note in notes:
        print(note)
    for fig in found:
        print(f"{fig.system:8} {fig.name:32} {fig.median:10.4g} {fig.unit}  {fig.values}")
    if args.json:
        args.json.write_text(json.dumps([f.to_json() for f in found], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
