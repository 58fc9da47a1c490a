"""The ``links`` and ``metadata`` formats: a page's links (absolute, deduplicated) and its tags,
a PDF's document info and link annotations, and bounds on hostile pages."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pypdf
from pypdf.annotations import Link

from trio_batch import Options
from trio_batch.web import shape
from trio_batch.web._extract._html_meta import MAX_LINKS, MAX_META_CHARS, MAX_TEXT_CHARS

from .support import make_pdf

ARTICLE = (Path(__file__).parent / "fixtures" / "formats" / "article.html").read_bytes()
PAGE_URL = "https://site.example/start/page.html"
BOTH = Options(formats=("links", "metadata"))


def shaped(html: bytes | str, options: Options = BOTH, url: str = PAGE_URL) -> dict[str, object]:
    data = html.encode() if isinstance(html, str) else html
    return shape(data, url=url, content_type="text/html", options=options).meta


def links_of(html: bytes | str, url: str = PAGE_URL) -> list[dict[str, object]]:
    links = shaped(html, Options(formats=("links",)), url)["links"]
    assert isinstance(links, list)
    return links


class TestLinks:
    def test_the_fixture_pages_links(self) -> None:
        """Every http(s) link of the page, navigation and footer included, once each, in
        document order, absolute against <base href>, without fragments, with its first anchor
        text (an image link's alt); mailto:, javascript:, data: and #fragment links are left
        out."""
        expected = [
            {"url": "https://site.example/", "text": "Home", "internal": True},
            {"url": "https://site.example/shop", "text": "Shop", "internal": True},
            {"url": "https://site.example/guides/care", "text": "the care page", "internal": True},
            {"url": "https://other.example/widgets", "text": "another site", "internal": False},
            {"url": "https://site.example/shop/blue", "text": "Blue widget", "internal": True},
            {"url": "https://site.example/about", "text": "About us", "internal": True},
        ]

        assert expected == links_of(ARTICLE)

    def test_relative_links_without_base_resolve_against_the_final_url(self) -> None:
        """Without <base href>, links are relative to the page's final URL; a host in another
        case or with a port of its own is told apart by host name only."""
        page = '<a href="next.html">n</a><a href="//SITE.example:8443/x">p</a><a href="../up">u</a>'

        expected = [
            {"url": "https://site.example/start/next.html", "text": "n", "internal": True},
            {"url": "https://SITE.example:8443/x", "text": "p", "internal": True},
            {"url": "https://site.example/up", "text": "u", "internal": True},
        ]

        assert expected == links_of(page)

    def test_a_link_first_seen_without_text_takes_the_next_text(self) -> None:
        """A URL whose first anchor has no text keeps the first non-empty one."""
        page = '<a href="/a"></a><a href="/a#x">Alpha</a><a href="/a">Other</a>'

        assert [{"url": "https://site.example/a", "text": "Alpha", "internal": True}] == (
            links_of(page)
        )

    def test_a_page_without_links_has_an_empty_list(self) -> None:
        """links is always there when asked for, empty on a page with none."""
        assert [] == links_of("<p>nothing to follow</p>")


class TestMetadata:
    def test_the_fixture_pages_tags(self) -> None:
        """Each tag under its own name (the first of a repeated one), the html lang, the
        canonical URL made absolute without its fragment, and the article times as
        published and modified; tags of no use to an agent (viewport) are left out."""
        expected = {
            "title": "Widget Guide",
            "lang": "en-GB",
            "description": "How to choose, keep and price widgets.",
            "keywords": "widgets, care, prices",
            "author": "Ada Widget",
            "og:title": "The Widget Guide",
            "og:type": "article",
            "og:image": "https://cdn.example/widget.png",
            "twitter:card": "summary_large_image",
            "twitter:site": "@widgets",
            "article:published_time": "2026-01-02T03:04:05Z",
            "article:modified_time": "2026-02-03T04:05:06Z",
            "published": "2026-01-02T03:04:05Z",
            "modified": "2026-02-03T04:05:06Z",
            "canonical": "https://site.example/guides/widgets?ref=canonical",
        }

        assert expected == shaped(ARTICLE)["metadata"]

    def test_json_ld_dates_when_there_are_no_article_tags(self) -> None:
        """datePublished and dateModified of JSON-LD (here in an @graph) give the dates."""
        page = (
            '<script type="application/ld+json">{"@graph": [{"@type": "WebPage"}, '
            '{"datePublished": "2025-05-01", "dateModified": "2025-06-01"}]}</script>'
            '<script type="application/ld+json">{not json</script><p>x</p>'
        )

        metadata = shaped(page)["metadata"]

        assert {"published": "2025-05-01", "modified": "2025-06-01"} == metadata

    def test_a_page_without_tags_has_an_empty_object(self) -> None:
        """metadata is always there when asked for, empty on a bare page."""
        assert {} == shaped("<p>bare</p>")["metadata"]


class TestPdf:
    @staticmethod
    def pdf() -> bytes:
        reader = pypdf.PdfReader(io.BytesIO(make_pdf(["First page", "Second page"])))
        writer = pypdf.PdfWriter(clone_from=reader)
        writer.add_metadata(
            {
                "/Title": "Annual  Report",
                "/Author": "Ada Widget",
                "/Subject": "Widgets",
                "/Creator": "Writer",
                "/Producer": "pypdf",
                "/CreationDate": "D:20240102030405+01'00'",
                "/ModDate": "D:2024060708",
            }
        )
        for page, url in ((0, "https://site.example/a#x"), (1, "https://other.example/b")):
            writer.add_annotation(page, Link(rect=(50, 50, 100, 100), url=url))
        writer.add_annotation(0, Link(rect=(50, 50, 100, 100), url="mailto:a@site.example"))
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    def test_document_info_and_uri_links(self) -> None:
        """A PDF's metadata is its document info (dates as ISO 8601) and page count; its
        links are its URI annotations (http(s) only, no anchor text), with markdown of its
        pages as the content."""
        result = shape(
            self.pdf(),
            url="https://site.example/report.pdf",
            content_type="application/pdf",
            options=Options(formats=("markdown", "links", "metadata")),
        )

        assert result.content.startswith("## Page 1\n\nFirst page")
        assert {
            "title": "Annual Report",
            "author": "Ada Widget",
            "subject": "Widgets",
            "creator": "Writer",
            "producer": "pypdf",
            "created": "2024-01-02T03:04:05",
            "modified": "2024-06-07T08:00:00",
            "page_count": 2,
        } == result.meta["metadata"]
        assert [
            {"url": "https://site.example/a", "text": "", "internal": True},
            {"url": "https://other.example/b", "text": "", "internal": False},
        ] == result.meta["links"]

    def test_links_follow_the_pages_asked_for(self) -> None:
        """With pages=, only the annotations of those pages are links."""
        result = shape(
            self.pdf(),
            url="https://site.example/report.pdf",
            content_type="application/pdf",
            options=Options(formats=("text", "links"), pages="2"),
        )

        assert result.content == "[page 2]\n\nSecond page\n"
        assert [{"url": "https://other.example/b", "text": "", "internal": False}] == (
            result.meta["links"]
        )


class TestHostile:
    def test_100k_links_stay_bounded(self) -> None:
        """A page of 100,000 distinct links gives the first MAX_LINKS, quickly."""
        page = "".join(f'<a href="/p{i}">{i}</a>' for i in range(100_000))
        start = time.process_time()

        links = links_of(page)

        assert len(links) == MAX_LINKS
        assert links[-1]["url"] == f"https://site.example/p{MAX_LINKS - 1}"
        assert time.process_time() - start < 5  # about 0.2 s here: a bound, not a goal

    def test_huge_values_are_cut(self) -> None:
        """Anchor texts and tag values of megabytes are cut to their bounds."""
        big = "x " * 500_000
        page = (
            f'<meta name="description" content="{big}"><title>{big}</title><a href="/a">{big}</a>'
        )

        meta = shaped(page)
        metadata, links = meta["metadata"], meta["links"]

        assert isinstance(metadata, dict)
        assert isinstance(links, list)
        assert len(metadata["description"]) <= MAX_META_CHARS
        assert len(metadata["title"]) <= MAX_META_CHARS
        assert len(links[0]["text"]) <= MAX_TEXT_CHARS

    def test_many_tags_are_bounded(self) -> None:
        """Thousands of og: tags give at most 200 keys."""
        page = "".join(f'<meta property="og:k{i}" content="v">' for i in range(5_000))

        metadata = shaped(page)["metadata"]

        assert isinstance(metadata, dict)
        assert len(metadata) == 200

    def test_deep_nesting_still_gives_links_and_metadata(self) -> None:
        """A link under 50,000 nested elements is found; nothing recurses."""
        page = '<html lang="de"><body>' + "<div>" * 50_000 + '<a href="/deep">deep</a>'

        meta = shaped(page)

        assert meta["links"] == [
            {"url": "https://site.example/deep", "text": "deep", "internal": True}
        ]
        assert meta["metadata"] == {"lang": "de"}

    def test_odd_urls_are_skipped(self) -> None:
        """Links that cannot be URLs (a bad port, an unclosed IPv6 literal, over 2,048
        characters) are left out rather than failing the page."""
        page = (
            '<a href="http://site.example:99999/">port</a><a href="http://[::1/">v6</a>'
            f'<a href="/{"x" * 3000}">long</a><a href="/ok">ok</a>'
        )

        assert ["https://site.example/ok"] == [link["url"] for link in links_of(page)]
