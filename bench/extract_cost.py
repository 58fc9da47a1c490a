"""CPU per page of the extractor on the fixture pages (issues 13 and 21: before and after).

Run from the repository root::

    python -m bench.extract_cost            # this checkout
    python -m bench.extract_cost dc141c4    # the extractor of another commit, same pages

Each page is decoded once, then converted ``ROUNDS`` times in each mode with
``html_to_text`` (the PDF with ``shape``); the best round's ``time.process_time`` is printed,
in milliseconds per page. An argument names a commit whose extractor to measure instead
(read from git, as ``bench.real_pages`` reads its previous extractor).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

from tests.web.pages import pages

from trio_batch import Options
from trio_batch.web import shape
from trio_batch.web._extract._shape import Body, decode

from .real_pages import previous_extractor

ROUNDS = 20
Convert = Callable[..., tuple[str, str]]


def _converter(commit: str | None) -> Convert:
    if commit is None:
        from trio_batch.web._extract._html import html_to_text

        return html_to_text
    module = previous_extractor(commit)
    if module is None:
        raise SystemExit(f"git cannot give the extractor of {commit}")
    convert: Convert = module.html_to_text
    return convert


def _best(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.extract_cost",
        description="CPU per page of the HTML extractor on the fixture pages of tests/web.",
    )
    parser.add_argument(
        "commit",
        nargs="?",
        help="a commit whose extractor to measure instead of this checkout's (same pages)",
    )
    convert = _converter(parser.parse_args().commit)
    totals = {"text": 0.0, "markdown": 0.0}
    print(f"{'page':32} {'KiB':>6} {'text ms':>8} {'md ms':>8}")
    for page in pages():
        if page.name.endswith(".pdf"):
            ms = _best(
                functools.partial(
                    shape,
                    page.body,
                    url=page.url,
                    content_type=page.content_type,
                    options=Options(),
                )
            )
            print(f"{page.name:32} {len(page.body) / 1024:6.1f} {ms:8.2f} {'':>8}")
            continue
        html = decode(Body(page.body, "text/html", None, page.url), "html")
        row = []
        for mode in totals:
            ms = _best(
                functools.partial(convert, html, base_url=page.url, markdown=mode == "markdown")
            )
            totals[mode] += ms
            row.append(ms)
        print(f"{page.name:32} {len(page.body) / 1024:6.1f} {row[0]:8.2f} {row[1]:8.2f}")
    print(f"{'all HTML pages':32} {'':6} {totals['text']:8.2f} {totals['markdown']:8.2f}")


if __name__ == "__main__":
    main()
