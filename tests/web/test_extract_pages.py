"""The extractor on real pages (and pages written in their generators' markup), through the
public ``trio_batch.web.shape``: expected outputs, and artefacts that must never come back."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.web.pages import MODES, Page, pages
from tests.web.support import PUBLIC_IP, FakeDNS
from trio_batch import Caller, Options, Target
from trio_batch.web import WebFetcher, shape

PAGES = pages()
HTML = [page for page in PAGES if page.name.endswith(".html")]
_FENCE = re.compile(r"^(`{3,})[^\n]*\n.*?^\1$", re.M | re.S)
_INLINE_CODE = re.compile(r"(`+).+?\1")


def artefacts(markdown: str) -> dict[str, int]:
    """How often each known Markdown artefact occurs (issue 13)."""
    fences = [m.group(0) for m in _FENCE.finditer(markdown)]
    unfenced = _FENCE.sub("", markdown)
    prose = _INLINE_CODE.sub("", unfenced)
    return {
        "permalink mark": markdown.count("¶") + len(re.findall(r"^#+ .*#$", prose, re.M)),
        "markup inside a fence": sum(
            len(re.findall(r"\*\*|\]\(", "\n".join(f.split("\n")[1:-1]))) for f in fences
        ),
        "markup inside inline code": sum(
            len(re.findall(r"\*\*[^*\s][^`]*?\*\*|\]\(", m.group(0)))
            for m in _INLINE_CODE.finditer(unfenced)
        ),
        "emphasis with an inner space": len(
            re.findall(r"(?<![\\*\w])(\*\*?)(?:(?=\S)[^*\n]*?\s|\s[^*\n]*?\S)\1(?!\*)", prose)
        ),
        "empty link": unfenced.count("[]("),
        "glued code blocks": sum(
            1
            for f in fences
            if re.search(r"\S(?:import [^\n;]+ from |(?:const|let|var) [^=\n]+ = )", f)
        ),
        "sidebar or footer": len(
            re.findall(
                r"Previous topic|Next topic|This Page|Quick search|Created using|"
                r"Proudly powered by|Recent Posts",
                markdown,
            )
        ),
        "edit link": markdown.count("[edit]"),
        "text read as HTML": len(re.findall(r"(?<!\\)<[A-Za-z/!?]", prose)),
    }


class TestExpectedOutputs:
    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
    def test_page_gives_its_expected_output(self, page: Page, mode: str) -> None:
        """Each fixture page shapes to the reviewed output beside it (regenerate with
        ``python -m tests.web.pages`` and read the diff)."""
        expected = page.expected_path(mode).read_text(encoding="utf-8")

        content, _meta = page.shaped(mode)

        assert expected == content

    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("page", HTML, ids=lambda page: page.name)
    def test_main_content_false_gives_the_whole_page(self, page: Page, mode: str) -> None:
        """``main_content: false`` shapes each fixture page into the whole page's reviewed
        output, byte for byte what the extractor gave before main content existed."""
        expected = page.expected_path(mode, whole=True).read_text(encoding="utf-8")

        content, _meta = page.shaped(mode, whole=True)

        assert expected == content

    @pytest.mark.parametrize("page", HTML, ids=lambda page: page.name)
    def test_main_content_keeps_the_pages_prose(self, page: Page) -> None:
        """Every sentence-ending paragraph of 60 characters or more in the whole page's text
        is in the main content's text too, which is shorter: the fixture pages lose chrome,
        not prose."""
        whole, _meta = page.shaped("text", whole=True)
        main, _meta = page.shaped("text")
        prose = [
            block
            for block in whole.split("\n\n")
            if len(block) >= 60 and block.rstrip().endswith((".", ":")) and "\n" not in block
        ]

        missing = [block for block in prose if block not in main]

        assert (missing, len(main) <= len(whole)) == ([], True)

    @pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
    def test_every_page_has_a_title(self, page: Page) -> None:
        """meta.title comes from <title>, or from the PDF's metadata."""
        _content, meta = page.shaped("text")

        assert meta["title"]


class TestArtefacts:
    def test_no_artefact_on_any_page(self) -> None:
        """None of the artefacts counted over 302 real pages in issue 13 appears in the
        Markdown of any fixture page."""
        found = {page.name: artefacts(page.shaped("markdown")[0]) for page in HTML}

        assert {name: {k: v for k, v in counts.items() if v} for name, counts in found.items()} == {
            name: {} for name in found
        }

    @pytest.mark.parametrize(
        ("markdown", "artefact"),
        [
            ("## DNS#\n", "permalink mark"),
            ("# IDLE¶\n", "permalink mark"),
            ("```\n**compound_stmt** ::= if_stmt\n```\n", "markup inside a fence"),
            ("```\n[x](https://a.example/)\n```\n", "markup inside a fence"),
            ("call `**kwargs**` here\n", "markup inside inline code"),
            ("*exception *copy.Error\n", "emphasis with an inner space"),
            ("a **both **directions\n", "emphasis with an inner space"),
            ("| [](https://a.example/p.html) |\n", "empty link"),
            ("```\nfamily: IPv6const dns = require('node:dns');\n```\n", "glued code blocks"),
            (
                "```\nconsole.log(x); // Prints: €const { a } = require('a');\n```\n",
                "glued code blocks",
            ),
            ("```\nimport { a } from 'b';const { a } = require('b');\n```\n", "glued code blocks"),
            ("Created using Sphinx 7.2.6.\n", "sidebar or footer"),
            ("#### Previous topic\n", "sidebar or footer"),
            ("- Returns: [<string>](https://a.example/s)\n", "text read as HTML"),
        ],
    )
    def test_the_counter_sees_each_artefact(self, markdown: str, artefact: str) -> None:
        """The artefact counter is not blind: each artefact, as it looked before the fix,
        is counted."""
        assert artefacts(markdown)[artefact] >= 1

    def test_the_counter_ignores_clean_markdown(self) -> None:
        """Escaped stars and tags, list bullets, emphasis and fenced code are not artefacts."""
        clean = (
            "- a \\* b and *emphasis* and **bold**\n\n*exception* copy.Error\n\n"
            "[\\<string>](https://a.example/s), a < b and `<b>`\n\n"
            "```js\nconst a = 1;\n```\n\n```js\nimport a from 'a';\n```\n"
        )

        assert sum(artefacts(clean).values()) == 0


class TestPdf:
    def test_code_stays_beside_its_text(self) -> None:
        """In a Chromium-made PDF, a code example follows the sentence that introduces it,
        although Chromium draws it after the paragraphs around it."""
        (page,) = [page for page in PAGES if page.name.endswith(".pdf")]

        lines = page.shaped("text")[0].splitlines()

        intro = lines.index("The most familiar statement is the if statement. For example:")
        assert lines[intro + 1] == '>>> size = int(input("Batch size: "))'
        assert (
            lines.index("There can be zero or more elif parts, and the else part is optional.")
            > intro + 7
        )

    def test_title_comes_from_the_metadata(self) -> None:
        """meta.title is the PDF's /Title."""
        (page,) = [page for page in PAGES if page.name.endswith(".pdf")]

        assert page.shaped("markdown")[1]["title"] == "Batchkit tutorial: control flow"


class TestFetcherAgrees:
    async def test_fetcher_gives_what_shape_gives(self) -> None:
        """Fetching a page gives the content and title that ``shape`` gives for its bytes."""
        by_path = {f"/{page.name}": page for page in PAGES}

        async def site(request: httpx.Request) -> httpx.Response:
            page = by_path[request.url.path]
            return httpx.Response(
                200, content=page.body, headers={"content-type": page.content_type}
            )

        dns = FakeDNS({"pages.example": [[PUBLIC_IP]]})
        async with WebFetcher(resolver=dns, transport=httpx.MockTransport(site)) as fetch:
            for path, page in by_path.items():
                url = f"https://pages.example{path}"
                fetched = await fetch(Caller("a"), Target(url, Options(mode="markdown")))
                direct = shape(
                    page.body,
                    url=url,
                    content_type=page.content_type,
                    options=Options(mode="markdown"),
                )

                assert (fetched.content, fetched.meta.get("title")) == (
                    direct.content,
                    direct.meta.get("title"),
                )
