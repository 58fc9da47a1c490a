"""Other extractors on PAGES' corpus: CPU per page and paragraph recall, beside ours (issue 28).

Run once, by hand, in a scratch environment that has the others (they are not the project's
dependencies)::

    python -m venv /tmp/others && /tmp/others/bin/pip install -e '.[web]' \\
        trafilatura html2text markdownify html-to-markdown
    /tmp/others/bin/python -m bench.other_extractors [--rounds 3]

Each page is decoded once; then every extractor converts it in turn (``time.process_time``,
the best of ``--rounds``), one ``gc.collect()`` a page outside the timings. Recall is PAGES'
(``bench.real_pages.paragraphs``). An extractor that is not installed is left out.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from .real_pages import _letters, build_corpus, cache_dir, paragraphs

Extract = Callable[[str, str], str]


def _extractors() -> dict[str, Extract]:
    from trio_batch.web._extract._html import html_to_text

    found: dict[str, Extract] = {
        "trio-batch text": lambda html, url: html_to_text(html, base_url=url)[0],
        "trio-batch markdown": lambda html, url: html_to_text(html, base_url=url, markdown=True)[0],
    }
    try:
        import trafilatura  # type: ignore[import-not-found,unused-ignore]

        found["trafilatura (markdown)"] = lambda html, url: (
            trafilatura.extract(html, output_format="markdown") or ""
        )
    except ImportError:
        pass
    try:
        import html2text  # type: ignore[import-not-found,unused-ignore]

        def h2t(html: str, url: str) -> str:
            converter = html2text.HTML2Text(baseurl=url)
            converter.body_width = 0
            return str(converter.handle(html))

        found["html2text"] = h2t
    except ImportError:
        pass
    try:
        import markdownify  # type: ignore[import-not-found,unused-ignore]

        found["markdownify"] = lambda html, url: str(
            markdownify.markdownify(html, heading_style="ATX")
        )
    except ImportError:
        pass
    try:
        import html_to_markdown  # type: ignore[import-not-found,unused-ignore]

        def h2m(html: str, url: str) -> str:
            out = html_to_markdown.convert(html)
            return str(getattr(out, "content", out))

        found["html-to-markdown (Rust)"] = h2m
    except ImportError:
        pass
    return found


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.other_extractors", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    built = build_corpus(cache_dir())
    if isinstance(built, str):
        print(built)
        return 1
    base, pages = built
    from trio_batch.web._extract._shape import Body, decode

    docs = []
    for page in pages:
        path = base / page
        path = path / "index.html" if path.is_dir() else path
        url = f"http://127.0.0.1/{page}"
        docs.append((url, decode(Body(path.read_bytes(), "text/html", None, url), "html")))
    wanted = [paragraphs(html) for _url, html in docs]
    total = sum(len(w) for w in wanted)
    extractors = _extractors()
    cpu = {name: [0.0] * len(docs) for name in extractors}
    found = dict.fromkeys(extractors, 0)
    chars = dict.fromkeys(extractors, 0)
    for i, (url, html) in enumerate(docs):
        for name, extract in extractors.items():
            best = float("inf")
            for _ in range(args.rounds):
                gc.collect()
                start = time.process_time()
                out = extract(html, url)
                best = min(best, time.process_time() - start)
            cpu[name][i] = best
            letters = _letters(out)
            found[name] += sum(1 for p in wanted[i] if p in letters)
            chars[name] += len(out)
    print(f"{len(docs)} pages, {total} paragraphs of 60+ characters, best of {args.rounds}")
    print("| extractor | CPU ms/page (mean) | p50 ms | max ms | paragraph recall | output chars |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in extractors:
        times = sorted(cpu[name])
        print(
            f"| {name} | {sum(times) / len(times) * 1e3:.1f} | {times[len(times) // 2] * 1e3:.2f}"
            f" | {times[-1] * 1e3:.0f} | {found[name] / total:.4f} | {chars[name] / 1e6:.2f} M |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
