"""MAIN: main-content extraction against ground truth, beside trafilatura and readability-lxml.

Two public corpora, each built once into the bench cache (``$TRIO_BATCH_BENCH_CACHE``, else
``~/.cache/trio-batch-bench``) by ``git clone`` at a pinned commit; without git or the
repository the corpus is skipped with a note (set ``TRIO_BATCH_READABILITY_REPO`` or
``TRIO_BATCH_ARTICLES_REPO`` to another clone's path or URL):

- ``readability``: Mozilla Readability's test pages (``test/test-pages/*/source.html``, the
  expected text from ``expected.html``; Apache-2.0), 130 pages of articles, blogs, docs and
  edge cases: the goal's corpus (issue 37: F1 >= 0.95 and >= trafilatura's);
- ``articles``: the article-extraction-benchmark (181 news and blog pages with hand-made
  article bodies; MIT): a second corpus, checked so that the rules are not tuned to one.

Each page is scored by its words (``\\w+`` tokens, as a multiset) against the expected text:
precision, recall, and F1 from the mean precision and mean recall over the pages (as the
article-extraction-benchmark computes it), plus how many pages lost most of their text (page
F1 under 0.5). Markdown is scored without its link targets. CPU per page is
``time.process_time`` around each call, the best of the rounds, every extractor on each page in
turn. ``trio-batch whole page`` is ``main_content: false``, today's output before issue 37.

Run ``python -m bench.main_content [--quick] [--corpus readability]``, or
``python -m bench.run --only MAIN``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._harness import Figure, log
from .real_pages import cache_dir

READABILITY = (
    "TRIO_BATCH_READABILITY_REPO",
    "https://github.com/mozilla/readability.git",
    "ab4027a8b37669745016869a37a504727992b2ba",
    "test/test-pages",
)
ARTICLES = (
    "TRIO_BATCH_ARTICLES_REPO",
    "https://github.com/scrapinghub/article-extraction-benchmark.git",
    "4a3bc979f76c0df73cb95fe272e2fc1b96f9f010",
    ".",
)
_TOKEN = re.compile(r"\w+")
_LINK_TARGET = re.compile(r"\]\((?:[^()]|\([^()]*\))*\)")
_BLOCK_START = re.compile(
    r"<(?=(?:p|div|br|li|h[1-6]|tr|td|th|pre|blockquote|figcaption|section|article|table|ul"
    r"|ol|dt|dd|header|footer|aside|main)\b)",
    re.I,
)


@dataclass(frozen=True)
class Page:
    name: str
    url: str
    html: str
    expected: str


def _clone(cache: Path, name: str, spec: tuple[str, str, str, str]) -> Path | str:
    """The corpus repository checked out at its commit in ``cache``, or why not."""
    env, url, commit, _folder = spec
    target = cache / name
    if (target / ".done").exists():
        return target
    if shutil.which("git") is None:
        return f"MAIN {name} skipped: git is needed to fetch the corpus"
    source = os.environ.get(env, url)
    shutil.rmtree(target, ignore_errors=True)
    got = subprocess.run(
        ["git", "clone", "--quiet", "--no-checkout", source, str(target)],
        capture_output=True,
        text=True,
    )
    if got.returncode == 0:
        got = subprocess.run(
            ["git", "-C", str(target), "checkout", "--quiet", commit],
            capture_output=True,
            text=True,
        )
    if got.returncode != 0:
        return f"MAIN {name} skipped: git could not fetch {source} ({got.stderr.strip()[-200:]})"
    (target / ".done").write_text(commit)
    return target


def text_of(html: str) -> str:
    """The words of an HTML fragment a reader sees, blocks apart (for expected texts and for
    extractors that answer HTML): lexbor's text, with a space before each block."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(_BLOCK_START.sub(" <", html))
    for node in tree.css("script, style, noscript, template"):
        node.decompose()
    root = tree.body or tree.root
    return root.text(deep=True, separator="") if root is not None else ""


def readability_pages(cache: Path) -> list[Page] | str:
    """Mozilla Readability's test pages, or why not."""
    root = _clone(cache, "readability", READABILITY)
    if isinstance(root, str):
        return root
    pages = []
    for folder in sorted((root / READABILITY[3]).iterdir()):
        source, expected = folder / "source.html", folder / "expected.html"
        if source.is_file() and expected.is_file():
            url = f"http://fakehost/{folder.name}/"
            pages.append(
                Page(
                    folder.name,
                    url,
                    source.read_text(errors="replace"),
                    text_of(expected.read_text()),
                )
            )
    return pages


def article_pages(cache: Path) -> list[Page] | str:
    """The article-extraction-benchmark's pages with their article bodies, or why not."""
    root = _clone(cache, "articles", ARTICLES)
    if isinstance(root, str):
        return root
    truth = json.loads((root / "ground-truth.json").read_text())
    pages = []
    for key, item in sorted(truth.items()):
        path = root / "html" / f"{key}.html.gz"
        if path.is_file():
            html = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            pages.append(
                Page(key, item.get("url") or "http://fakehost/", html, item["articleBody"])
            )
    return pages


# -- the extractors ----------------------------------------------------------------------------

Extract = Callable[[str, str], str]


def extractors() -> tuple[dict[str, Extract], list[str]]:
    """Every extractor that can run here, and notes on those that cannot."""
    from trio_batch.web._extract._html import html_to_text

    found: dict[str, Extract] = {
        "trio-batch text": lambda html, url: html_to_text(html, base_url=url)[0],
        "trio-batch markdown": lambda html, url: _LINK_TARGET.sub(
            "]", html_to_text(html, base_url=url, markdown=True)[0]
        ),
        "trio-batch whole page": lambda html, url: html_to_text(
            html, base_url=url, main_content=False
        )[0],
    }
    notes = []
    try:
        import trafilatura

        found["trafilatura"] = lambda html, url: trafilatura.extract(html, url=url) or ""
    except ImportError:
        notes.append("MAIN: trafilatura is not installed (the bench dependency group has it)")
    try:
        from readability import Document  # type: ignore[import-untyped,unused-ignore]

        found["readability-lxml"] = lambda html, url: text_of(Document(html).summary())
    except ImportError:
        notes.append("MAIN: readability-lxml is not installed (the bench dependency group has it)")
    return found, notes


# -- scoring -----------------------------------------------------------------------------------


def score(expected: str, got: str) -> tuple[float, float]:
    """Precision and recall of ``got``'s words against ``expected``'s (as multisets)."""
    want, have = Counter(_TOKEN.findall(expected)), Counter(_TOKEN.findall(got))
    common = sum((want & have).values())
    precision = common / sum(have.values()) if have else (1.0 if not want else 0.0)
    recall = common / sum(want.values()) if want else 1.0
    return precision, recall


def summary(scores: Sequence[tuple[float, float]]) -> dict[str, float]:
    """F1 of the mean precision and the mean recall, and the pages that lost most."""
    precision = sum(p for p, _ in scores) / len(scores)
    recall = sum(r for _, r in scores) / len(scores)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    lost = sum(1 for p, r in scores if (2 * p * r / (p + r) if p + r else 0.0) < 0.5)
    return {"f1": f1, "precision": precision, "recall": recall, "lost": lost}


def measure(pages: Sequence[Page], rounds: int) -> dict[str, dict[str, Any]]:
    """Each extractor's scores and CPU per page over ``pages``."""
    found, notes = extractors()
    for note in notes:
        log(note)
    cpu = {name: [float("inf")] * len(pages) for name in found}
    scores: dict[str, list[tuple[float, float]]] = {name: [] for name in found}
    per_page: dict[str, list[float]] = {name: [] for name in found}
    for i, page in enumerate(pages):
        for rnd in range(rounds):
            for name, extract in found.items():
                start = time.process_time()
                try:
                    got = extract(page.html, page.url)
                except Exception as exc:  # an extractor that fails scores nothing on the page
                    log(f"MAIN {name} failed on {page.name}: {type(exc).__name__}")
                    got = ""
                cpu[name][i] = min(cpu[name][i], time.process_time() - start)
                if rnd == 0:
                    p, r = score(page.expected, got)
                    scores[name].append((p, r))
                    per_page[name].append(2 * p * r / (p + r) if p + r else 0.0)
    return {
        name: {
            **summary(scores[name]),
            "cpu_ms": sum(cpu[name]) / len(pages) * 1e3,
            "page_f1": per_page[name],
        }
        for name in found
    }


# -- figures -----------------------------------------------------------------------------------

CORPORA: dict[str, Callable[[Path], list[Page] | str]] = {
    "readability": readability_pages,
    "articles": article_pages,
}


def run_main(mode: str, corpora: Sequence[str] = tuple(CORPORA)) -> tuple[list[Figure], list[str]]:
    """The MAIN figures for ``bench.run`` (``mode``: full, quick or tiny), and notes."""
    if mode == "tiny":
        return [], ["MAIN is not run in a tiny run (it fetches two corpora)"]
    figures: list[Figure] = []
    notes: list[str] = []
    for corpus in corpora:
        pages = CORPORA[corpus](cache_dir())
        if isinstance(pages, str):
            log(pages)
            notes.append(pages)
            continue
        if mode != "full":
            pages = pages[::3]
        results = measure(pages, 3 if mode == "full" else 1)
        figures += corpus_figures(corpus, results, len(pages))
    return figures, notes


def corpus_figures(corpus: str, results: dict[str, dict[str, Any]], n: int) -> list[Figure]:
    out = []
    whole = results.get("trio-batch whole page", {}).get("cpu_ms")
    for name, got in results.items():
        extra = {"corpus": corpus, "pages": n, "lost": got["lost"]}
        log(
            f"MAIN {corpus:12} {name:22} F1 {got['f1']:.3f} (precision {got['precision']:.3f}, "
            f"recall {got['recall']:.3f}), {got['lost']} pages lost, {got['cpu_ms']:.2f} ms CPU"
        )
        for key in ("f1", "precision", "recall"):
            out.append(Figure("MAIN", corpus, name, key, "share", [got[key]], True, extra))
        out.append(
            Figure("MAIN", corpus, name, "CPU per page", "ms", [got["cpu_ms"]], False, extra)
        )
        if whole and name.startswith("trio-batch") and name != "trio-batch whole page":
            out.append(
                Figure(
                    "MAIN",
                    corpus,
                    name,
                    "CPU over whole page",
                    "x",
                    [got["cpu_ms"] / whole],
                    False,
                    extra,
                )
            )
    return out


def main_goals(figures: Sequence[Figure]) -> list[tuple[str, float, bool, str]]:
    """Issue 37's goals on Readability's pages, where the run has them."""
    found = {(f.store, f.system, f.name): f.median for f in figures if f.workload == "MAIN"}
    ours = found.get(("readability", "trio-batch text", "f1"))
    if ours is None:
        return []
    goals = [("MAIN F1 on Readability's pages >= 0.95", ours, ours >= 0.95, f"{ours:.3f}")]
    theirs = found.get(("readability", "trafilatura", "f1"))
    if theirs is not None:
        goals.append(
            (
                "MAIN F1 on Readability's pages >= trafilatura's",
                ours - theirs,
                ours >= theirs,
                f"{ours:.3f} against {theirs:.3f}",
            )
        )
    cost = found.get(("readability", "trio-batch text", "CPU over whole page"))
    if cost is not None:
        goals.append(("MAIN CPU a page <= 2x the whole page's", cost, cost <= 2, f"{cost:.2f}x"))
    return goals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.main_content", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a third of the pages, one round")
    parser.add_argument(
        "--corpus", choices=sorted(CORPORA), action="append", help="one corpus (default: both)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--pages", type=Path, help="write each page's F1 per extractor here")
    args = parser.parse_args(argv)
    corpora = args.corpus or list(CORPORA)
    if args.pages:
        detail = {}
        for corpus in corpora:
            pages = CORPORA[corpus](cache_dir())
            if isinstance(pages, str):
                print(pages)
                continue
            results = measure(pages, 1)
            detail[corpus] = {
                name: dict(zip((p.name for p in pages), got["page_f1"], strict=True))
                for name, got in results.items()
            }
            corpus_figures(corpus, results, len(pages))
        args.pages.write_text(json.dumps(detail, indent=1) + "\n")
        return 0
    found, notes = run_main("quick" if args.quick else "full", corpora)
    for note in notes:
        print(note)
    for fig in found:
        print(f"{fig.store:12} {fig.system:22} {fig.name:20} {fig.median:8.3f} {fig.unit}")
    if args.json:
        args.json.write_text(json.dumps([f.to_json() for f in found], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
