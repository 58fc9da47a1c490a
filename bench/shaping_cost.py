"""The CPU cost per page of the web fetcher's shaping path (issue 12: before and after).

Run from the repository root::

    python -m bench.shaping_cost            # this checkout
    git archive HEAD~N src | tar -x -C /tmp/old && \\
        PYTHONPATH=/tmp/old/src:. python -m bench.shaping_cost   # an older one

Each page is fetched through a ``WebFetcher`` (fake DNS, an in-process ``MockTransport``, no
cache), after a warm-up that starts the shaping workers. For each page it prints the wall time
per fetch and the CPU time per fetch of the service process and of its worker processes (read
from ``/proc``, so Linux only). Only the public API is used, so the same script measures any
version.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import httpx
import trio
from tests.web.support import ARTICLE_HTML

from trio_batch import Caller, Options, Target
from trio_batch.web import WebFetcher

_TICK = os.sysconf("SC_CLK_TCK")


def _pages() -> dict[str, tuple[bytes, str]]:
    article = (ARTICLE_HTML * 30)[: 16 * 1024]
    big_html = (ARTICLE_HTML * 2000)[: 1024 * 1024]
    prose = b"The quick brown fox jumps over the lazy dog. " * 12 + b"\n\n"
    items = [{"name": f"item {i}", "price": i} for i in range(2000)]
    return {
        "/small.txt": (b"hello world\n", "text/plain"),
        "/text-64k.txt": ((prose * 200)[: 64 * 1024], "text/plain"),
        "/article.html": (article, "text/html"),
        "/big.html": (big_html, "text/html"),
        "/data.json": (json.dumps({"items": items}).encode(), "application/json"),
        "/log-1m.txt": ((b"GET /index.html 200 1234\n" * 50_000)[: 1024 * 1024], "text/plain"),
    }


CASES: list[tuple[str, str, Options, int]] = [
    ("12 B text, no options", "/small.txt", Options(), 400),
    ("12 B text, grep", "/small.txt", Options(grep="world"), 400),
    ("64 KiB text, question", "/text-64k.txt", Options(question="lazy fox"), 100),
    ("16 KiB HTML, text", "/article.html", Options(), 200),
    ("16 KiB HTML, question", "/article.html", Options(question="red widget cost"), 200),
    ("1 MiB HTML, text", "/big.html", Options(), 5),
    ("80 KB JSON, jq", "/data.json", Options(jq=".items[10].name"), 100),
    ("1 MiB text, grep", "/log-1m.txt", Options(grep=" 404 "), 20),
]


def _descendants() -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _workers_cpu() -> float:
    total = 0.0
    for pid in _descendants():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(
    fetch: WebFetcher, path: str, options: Options, count: int
) -> tuple[float, float, float]:
    target = Target(f"http://site.example{path}", options)
    caller = Caller("bench")
    for _ in range(3):  # warm up: start the workers, fill caches
        await fetch(caller, target)
    wall, own, workers = time.perf_counter(), _self_cpu(), _workers_cpu()
    for _ in range(count):
        await fetch(caller, target)
    return (
        (time.perf_counter() - wall) / count,
        (_self_cpu() - own) / count,
        (_workers_cpu() - workers) / count,
    )


async def main() -> None:
    pages = _pages()

    async def site(request: httpx.Request) -> httpx.Response:
        body, ctype = pages[request.url.path]
        return httpx.Response(200, content=body, headers={"content-type": ctype})

    async def dns(host: str, port: int) -> list[str]:
        await trio.lowlevel.checkpoint()
        return ["93.184.216.34"]

    print(f"{'page':28} {'wall ms':>9} {'service CPU ms':>15} {'workers CPU ms':>15}")
    async with WebFetcher(resolver=dns, transport=httpx.MockTransport(site)) as fetch:
        for name, path, options, count in CASES:
            wall, own, workers = await _measure(fetch, path, options, count)
            print(f"{name:28} {wall * 1e3:9.2f} {own * 1e3:15.2f} {workers * 1e3:15.2f}")


if __name__ == "__main__":
    argparse.ArgumentParser(
        prog="python -m bench.shaping_cost",
        description="Wall and CPU time per fetch through WebFetcher's shaping path, per page.",
    ).parse_args()
    trio.run(main)
