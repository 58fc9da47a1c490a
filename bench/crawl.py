"""CRAWL: a crawl of a local site of 10,000 pages against ``run`` over the same pages (issue 38).

    python -m bench.crawl [--quick | --tiny] [--json FILE]

or ``python -m bench.run --only CRAWL`` (which adds the figures and goals to the bench report).
The site is ``bench/crawl_site.py`` (N pages with link structure, every page's links in varied
spellings, and the issue's traps), served by a process of its own on 127.0.0.2-4. Figures:

- **judge**: CPU microseconds per URL of :meth:`CrawlRules.judge <trio_batch._crawl_rules.
  CrawlRules.judge>`, in this process: over the links of the site's pages as found (menus
  repeat, so most URLs come again), and over distinct URLs (none seen before). The engine
  judges every link of every page, up to 1,000 a page.
- **run**: ``trio-batch run`` over the site's N URLs (a child process): pages/s and peak RSS.
- **crawl (CLI)**: ``trio-batch crawl START --limit N`` of the same site, in the same run:
  pages/s against ``run`` (goal >= 0.8x), peak RSS of the N-page crawl against a crawl of N/10
  pages (goal <= 1.5x), pages the site was asked for twice (goal 0) and pages stored past the
  limit (goal 0). Peak RSS is the largest ``ru_maxrss`` from ``wait4`` of the CLI and of the
  shaping fork server it leaves behind (the largest process of the CLI's tree).
- **crawl (API)**: ``engine.crawl`` on a 500-page site with ``limit`` 200 at ``concurrency``
  8 (the issue's first Done-when): pages stored past the limit or short of it, pages fetched
  twice, disallowed pages fetched, requests off the site (all goals 0).

The CLI crawl rows wait for ``trio-batch crawl``: until ``trio-batch crawl --help`` works
they are skipped with a note, and the judge, ``run`` and API rows are measured alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import trio

from trio_batch._crawl import CrawlSpec
from trio_batch._crawl_rules import CrawlRules, _cached_parts

from ._harness import HERE, Figure, adopt_orphans, children_of, log, reap_orphans
from .crawl_site import CrawlSite, serve_crawl_site
from .real_pages import _cli as cli_command, wait_quiet

ALLOW_NET = "127.0.0.0/8"


@dataclass(frozen=True)
class CrawlSettings:
    """The sizes of CRAWL; ``FULL`` is what the issue states."""

    pages: int = 10_000
    small: int = 1_000
    api_pages: int = 500
    api_limit: int = 200
    concurrency: int = 8
    seconds: float = 0.0
    judge_urls: int = 100_000
    quiet: float = 60.0


CRAWL_FULL = CrawlSettings()
CRAWL_QUICK = CrawlSettings(pages=1_000, small=200, judge_urls=20_000, quiet=10.0)
CRAWL_TINY = CrawlSettings(
    pages=60, small=20, api_pages=60, api_limit=20, judge_urls=2_000, quiet=0
)


# -- a child process ----------------------------------------------------------------------------


@dataclass
class ChildRun:
    """One child process: wall and CPU seconds, peak RSS, exit code and its JSON lines."""

    wall: float
    cpu: float
    peak_rss: int
    """Bytes: the largest resident set of the child and the children it reaped."""
    returncode: int
    lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(1 for line in self.lines if line.get("status") == "done")


def run_child(command: Sequence[str], out: Path, errors: Path) -> ChildRun:
    """Run ``command`` to its end; its result lines are read from ``out`` (JSON a line)."""
    adopt_orphans()
    keep = children_of(os.getpid())
    start = time.perf_counter()
    with errors.open("wb") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    orphans_cpu, orphans_peak = reap_orphans(keep)  # the fork server and its shaping workers
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = []
    if out.exists():
        for text in out.read_text().splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                continue
    return ChildRun(
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime + orphans_cpu,
        peak_rss=max(usage.ru_maxrss * 1024, orphans_peak),  # KiB on Linux
        returncode=proc.returncode,
        lines=lines,
    )


# -- the site as a process ----------------------------------------------------------------------


@dataclass
class SiteProcess:
    """A :class:`CrawlSite` served by ``python -m bench.crawl_site``, with its log over HTTP."""

    site: CrawlSite
    """The site's pages as this process sees them (its port set): what URLs it has."""
    proc: subprocess.Popen[bytes]

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.site.url(path), timeout=30) as answer:
            found: dict[str, Any] = json.load(answer)
            return found

    def stats(self) -> dict[str, Any]:
        """The site's log (``CrawlSite.stats``)."""
        return self._get("/_site/stats")

    def reset(self) -> None:
        """Forget the log: the next run starts counting afresh."""
        self._get("/_site/reset")


@contextmanager
def site_process(pages: int, seconds: float = 0.0) -> Iterator[SiteProcess]:
    """A site of ``pages`` pages in a process of its own, stopped on exit."""
    command = [sys.executable, "-m", "bench.crawl_site", "--pages", str(pages)]
    with subprocess.Popen(
        [*command, "--seconds", str(seconds)],
        cwd=HERE.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stderr is not None
            first = proc.stdout.readline()
            if not first:
                raise RuntimeError(f"the crawl site did not start: {proc.stderr.read()[-500:]!r}")
            port = json.loads(first)["port"]
            yield SiteProcess(CrawlSite(pages, seconds, port=port), proc)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


# -- run and crawl through the CLI --------------------------------------------------------------


def run_list(site: SiteProcess, workdir: Path, label: str, workers: int) -> ChildRun:
    """``trio-batch run`` over the site's N page URLs."""
    urls = workdir / f"{label}.urls"
    urls.write_text("".join(u + "\n" for u in site.site.urls()))
    out = workdir / f"{label}.jsonl"
    command = [
        *cli_command(),
        "run",
        str(urls),
        "--allow-net",
        ALLOW_NET,
        "--progress",
        "off",
        "--workers",
        str(workers),
        "--fresh",
        "--db",
        str(workdir / f"{label}.sqlite"),
        "--out",
        str(out),
    ]
    return run_child(command, out, workdir / f"{label}.stderr")


def crawl_cli(
    site: SiteProcess, workdir: Path, label: str, limit: int, concurrency: int
) -> ChildRun:
    """``trio-batch crawl START --limit N`` of the site (deep enough to reach every page)."""
    out = workdir / f"{label}.jsonl"
    deepest = max(site.site.depth(i) for i in range(site.site.pages))
    command = [
        *cli_command(),
        "crawl",
        site.site.start,
        "--limit",
        str(limit),
        "--max-depth",
        str(deepest + 2),
        "--concurrency",
        str(concurrency),
        "--allow-net",
        ALLOW_NET,
        "--progress",
        "off",
        "--db",
        str(workdir / f"{label}.sqlite"),
        "--out",
        str(out),
    ]
    return run_child(command, out, workdir / f"{label}.stderr")


def crawl_cli_missing() -> str | None:
    """Why the crawl CLI cannot be measured (None: it can)."""
    try:
        done = subprocess.run(
            [*cli_command(), "crawl", "--help"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"CRAWL (CLI) skipped: trio-batch could not be started ({exc})"
    if done.returncode != 0:
        return "CRAWL (CLI) skipped: `trio-batch crawl` does not exist yet (issue 38's doors)"
    return None


def cli_rows(s: CrawlSettings, workdir: Path) -> tuple[list[Figure], list[str]]:
    """``run`` over the N pages, then (when the CLI has it) crawls of N and N/10 pages."""
    figures: list[Figure] = []
    notes: list[str] = []
    missing = crawl_cli_missing()
    extra = {"pages": s.pages, "workers": s.concurrency, "seconds_per_page": s.seconds}
    with site_process(s.pages, s.seconds) as site:
        waited = wait_quiet(s.quiet) if s.quiet else 0.0
        run = run_list(site, workdir, "run", s.concurrency)
        run_twice = len(site.stats()["twice"])
        log(
            f"CRAWL run   {s.pages} pages: {run.done / run.wall:7.1f} pages/s, "
            f"{run.peak_rss / 2**20:6.1f} MiB peak RSS (waited {waited:.0f} s for a quiet machine)"
        )
        figures += [
            Figure(
                "CRAWL", "sqlite", "run", "pages/s", "pages/s", [run.done / run.wall], extra=extra
            ),
            Figure(
                "CRAWL", "sqlite", "run", "peak RSS", "MiB", [run.peak_rss / 2**20], False, extra
            ),
        ]
        if run.done != s.pages or run_twice:
            notes.append(f"CRAWL run stored {run.done} of {s.pages} pages, {run_twice} twice")
        if missing is not None:
            notes.append(missing)
            return figures, notes
        site.reset()
        crawl = crawl_cli(site, workdir, "crawl", s.pages, s.concurrency)
        twice = len(site.stats()["twice"])
        site.reset()
        small = crawl_cli(site, workdir, "crawl-small", s.small, s.concurrency)
        twice_small = len(site.stats()["twice"])
    figures += _crawl_figures(s, run, crawl, small, twice + twice_small)
    return figures, notes


def _crawl_figures(
    s: CrawlSettings, run: ChildRun, crawl: ChildRun, small: ChildRun, twice: int
) -> list[Figure]:
    log(
        f"CRAWL crawl {s.pages} pages: {crawl.done / crawl.wall:7.1f} pages/s, "
        f"{crawl.peak_rss / 2**20:6.1f} MiB peak RSS ({small.peak_rss / 2**20:.1f} MiB at "
        f"{s.small}); {twice} fetched twice, {crawl.done - s.pages} / {small.done - s.small} "
        "past the limit"
    )
    extra = {"pages": s.pages, "small": s.small, "concurrency": s.concurrency}
    speed = (crawl.done / crawl.wall) / (run.done / run.wall)
    memory = crawl.peak_rss / small.peak_rss
    overshoot = max(crawl.done - s.pages, small.done - s.small, 0)

    def figure(name: str, unit: str, value: float, higher: bool, goal: float) -> Figure:
        return Figure(
            "CRAWL", "sqlite", "crawl", name, unit, [value], higher, {**extra, "goal": goal}
        )

    return [
        Figure(
            "CRAWL", "sqlite", "crawl", "pages/s", "pages/s", [crawl.done / crawl.wall], extra=extra
        ),
        Figure(
            "CRAWL", "sqlite", "crawl", "peak RSS", "MiB", [crawl.peak_rss / 2**20], False, extra
        ),
        figure("pages/s vs run", "x", speed, True, 0.8),
        figure(f"peak RSS {s.pages} vs {s.small} pages", "x", memory, False, 1.5),
        figure("pages fetched twice", "pages", float(twice), False, 0),
        figure("pages past the limit", "pages", float(overshoot), False, 0),
    ]


# -- the crawl through the API ------------------------------------------------------------------


async def api_crawl(pages: int, limit: int, concurrency: int, workdir: Path) -> dict[str, int]:
    """A crawl through ``engine.crawl`` over SQLite, robots.txt read through the engine's
    site guide: what the job stored and what the site saw."""
    from trio_batch import Caller, Config, open_engine
    from trio_batch.stores import SQLiteStore
    from trio_batch.web import WebFetcher, WebSiteGuide

    async with trio.open_nursery() as nursery:
        site = await serve_crawl_site(nursery, pages)
        deepest = max(site.depth(i) for i in range(pages))
        spec = CrawlSpec(site.start, limit=limit, max_depth=deepest + 2, concurrency=concurrency)
        config = Config(workers=concurrency, max_workers=concurrency)
        async with (
            SQLiteStore.open(str(workdir / "api.sqlite")) as store,
            WebFetcher(allow=site.allow) as fetch,
            open_engine(store, fetch, config, site_guide=WebSiteGuide(fetch)) as engine,
        ):
            submitted = await engine.crawl(Caller("bench"), "fleet", spec)
            with engine.watch(submitted.id) as watch:
                while (job := await engine.job(submitted.id)) is not None and job.status.live:
                    await watch.wait()
        nursery.cancel_scope.cancel()
    assert job is not None
    return {
        "done": job.targets_done,
        "twice": len(site.twice()),
        "disallowed": len(site.disallowed()),
        "off_site": site.hosts_hit().get("other", 0) + site.hosts_hit().get("www", 0),
    }


def api_rows(s: CrawlSettings, workdir: Path) -> tuple[list[Figure], list[str]]:
    """The issue's first Done-when through the API: exact limit, nothing twice or off-site."""
    seen = trio.run(api_crawl, s.api_pages, s.api_limit, s.concurrency, workdir)
    extra = {"pages": s.api_pages, "limit": s.api_limit, "concurrency": s.concurrency, "goal": 0}
    values = {
        "API: pages stored off the limit": abs(seen["done"] - s.api_limit),
        "API: pages fetched twice": seen["twice"],
        "API: disallowed pages fetched": seen["disallowed"],
        "API: requests off the site": seen["off_site"],
    }
    log("CRAWL api   " + ", ".join(f"{k[5:]} {v}" for k, v in values.items()))
    return [
        Figure("CRAWL", "sqlite", "crawl", name, "pages", [float(v)], False, extra)
        for name, v in values.items()
    ], []


# -- the judge ----------------------------------------------------------------------------------


def judge_rows(s: CrawlSettings) -> list[Figure]:
    """µs per URL judged: the site's links as found (repeating), and distinct URLs."""
    site = CrawlSite(max(s.pages, 1_000), port=8080)
    spec = CrawlSpec(site.start, limit=s.pages, max_depth=64)
    found: list[str] = []
    page = 0
    while len(found) < s.judge_urls:
        base = site.url(site.path(page % site.pages))
        found += [urljoin(base, link) for link in site.links(page % site.pages)]
        page += 1
    rng = random.Random(38)
    distinct = [
        f"http://{site.hosts[0]}:8080/s{rng.randrange(100)}/p{i}-{rng.randrange(10**6)}.html"
        + (f"?q={i}&utm_source=x" if i % 3 == 0 else "")
        for i in range(s.judge_urls)
    ]
    figures = []
    for label, urls in (("site links", found), ("distinct URLs", distinct)):
        _cached_parts.cache_clear()
        rules = CrawlRules(spec)
        start = time.process_time()  # CPU time: the machine's other load does not count
        for url in urls:
            rules.judge(url, 1)
        micros = (time.process_time() - start) / len(urls) * 1e6
        log(f"CRAWL judge {label:14} {micros:6.2f} µs/URL over {len(urls):,} URLs")
        figures.append(
            Figure(
                "CRAWL",
                "none",
                "rules",
                f"judge, {label}",
                "µs",
                [micros],
                False,
                {"urls": len(urls)},
            )
        )
    return figures


# -- all of it ----------------------------------------------------------------------------------


def run_crawl(s: CrawlSettings = CRAWL_FULL) -> tuple[list[Figure], list[str]]:
    """Every CRAWL figure this checkout can measure, and notes on what it could not."""
    figures = judge_rows(s)
    with tempfile.TemporaryDirectory(prefix="trio-batch-crawl-") as tmp:
        workdir = Path(tmp)
        cli, cli_notes = cli_rows(s, workdir)
        api, api_notes = api_rows(s, workdir)
    return figures + cli + api, cli_notes + api_notes


def crawl_goals(figures: Sequence[Figure]) -> list[tuple[str, float, bool, str]]:
    """The issue's CRAWL goals met or not: (goal, value, met, detail) for each measured one."""
    out: list[tuple[str, float, bool, str]] = []
    for fig in figures:
        if fig.workload != "CRAWL" or "goal" not in fig.extra:
            continue
        goal, value = fig.extra["goal"], fig.median
        if fig.higher_is_better:
            out.append((f"CRAWL {fig.name} >= {goal}", value, value >= goal, f"{value:.2f}"))
        else:
            out.append((f"CRAWL {fig.name} <= {goal}", value, value <= goal, f"{value:.4g}"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.crawl``: measure, print every figure, optionally write them as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.crawl", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="1,000 pages (under a minute)")
    parser.add_argument("--tiny", action="store_true", help="a few seconds (the harness test)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    s = CRAWL_TINY if args.tiny else CRAWL_QUICK if args.quick else CRAWL_FULL
    figures, notes = run_crawl(s)
    for fig in figures:
        print(f"{fig.system:6} {fig.name:40} {fig.median:10.3f} {fig.unit}")
    for goal, _, met, detail in crawl_goals(figures):
        print(f"{'met' if met else 'NOT MET':8} {goal} ({detail})")
    for note in notes:
        print(note)
    if args.json:
        args.json.write_text(json.dumps([f.to_json() for f in figures], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
