"""Target options: validation at submit, and shaping of real fixtures (SPEC §6)."""

from __future__ import annotations

import json

import pytest

from tests.web.support import (
    ARTICLE_HTML,
    CALLER,
    DATA_JSON,
    HTML,
    JSON,
    LOOPBACK,
    PDF,
    REPORT_PAGES,
    LocalServer,
    Reply,
    make_pdf,
)
from trio_batch import Options, Result, Target, TargetError
from trio_batch.web import WebFetcher, validate_options
from trio_batch.web._extract._shape import Body, shape_body


def html_body(data: bytes = ARTICLE_HTML) -> Body:
    return Body(data, "text/html", "utf-8", "http://site.example/guide/")


@pytest.fixture
def site(server: LocalServer) -> LocalServer:
    """The local server with an HTML page, a JSON document, a PDF and an image."""
    server.route("/guide", Reply(body=ARTICLE_HTML, headers=HTML))
    server.route("/data.json", Reply(body=DATA_JSON, headers=JSON))
    server.route("/report.pdf", Reply(body=make_pdf(REPORT_PAGES), headers=PDF))
    server.route(
        "/logo.png",
        Reply(body=b"\x89PNG\r\n\x1a\n\x00\x00", headers=[("content-type", "image/png")]),
    )
    return server


async def fetch_from(site: LocalServer, path: str, options: Options) -> Result:
    async with WebFetcher(allow=LOOPBACK) as fetch:
        return await fetch(CALLER, Target(site.url(path), options))


class TestValidateOptions:
    @pytest.mark.parametrize(
        ("options", "kind", "meta"),
        [
            (Options(), "html", {"mode": "text"}),
            (Options(mode="markdown"), "html", {"mode": "markdown"}),
            (Options(grep="widget|gadget", context=True), "html", {"matches": 5}),
            (Options(jq=".items[] | .name"), "json", {"jq_results": 2}),
            (Options(pages="1-3,7,10-"), "pdf", {"page_count": 3, "pages": [1, 2, 3]}),
            (Options(question="how much is a widget?"), "html", {"paragraphs": 9}),
            (Options(question="q", context=False, recover=True), "html", {"passages": []}),
        ],
    )
    def test_accepts_valid_options(
        self, options: Options, kind: str, meta: dict[str, object]
    ) -> None:
        """Valid options pass, and each of them takes effect on a response it fits."""
        bodies = {
            "html": html_body(),
            "json": Body(DATA_JSON, "application/json", None, "http://site.example/data.json"),
            "pdf": Body(make_pdf(REPORT_PAGES), "application/pdf", None, "http://site.example/r"),
        }
        validate_options(options)
        _content, shaped = shape_body(bodies[kind], options)

        assert meta == {name: shaped.get(name) for name in meta}

    @pytest.mark.parametrize(
        ("options", "fragment"),
        [
            (Options(mode="pdf"), "unknown mode 'pdf'"),
            (Options(grep="(unclosed"), "grep is not a valid regular expression"),
            (Options(jq=".items[ | .name"), "does not compile: '[' at character 7 is never closed"),
            (Options(jq="env.HOME"), "'env'"),
            (Options(jq="$ENV.PATH"), "'$ENV'"),
            (Options(jq='"\\(input)"'), "'input'"),
            (Options(pages="a-b"), "pages must be page numbers"),
            (Options(pages="0-2"), "invalid range '0-2'"),
            (Options(pages="5-2"), "invalid range '5-2'"),
            (Options(jq=".", pages="1"), "jq and pages cannot be used together"),
            (Options(grep="x", question="y"), "grep and question cannot be used together"),
            (Options(context=True), "context applies with grep or question only"),
            (Options(question="   "), "question is blank"),
            (Options(grep="x" * 5000), "the limit is 4,096"),
            (Options(max_age=-1), "max_age must be 0 or more seconds (got -1)"),
        ],
    )
    def test_refuses_invalid_options_with_a_400(self, options: Options, fragment: str) -> None:
        """Invalid options are a TargetError 400 naming the option and the parse error."""
        with pytest.raises(TargetError) as info:
            validate_options(options)

        assert info.value.status == 400
        assert fragment in info.value.msg
        assert info.value.hint

    async def test_fetch_refuses_invalid_options_without_fetching(self, site: LocalServer) -> None:
        """The fetcher validates options before it takes any network action."""
        with pytest.raises(TargetError, match="unknown mode"):
            await fetch_from(site, "/guide", Options(mode="fancy"))

        assert site.hits["/guide"] == 0


class TestHtml:
    async def test_text_is_readable_without_scripts_styles_or_navigation(
        self, site: LocalServer
    ) -> None:
        """mode=text (the default) keeps headings and lists and drops non-content."""
        result = await fetch_from(site, "/guide", Options())

        assert result.content.startswith("Widgets\n\nWidgets are small parts")
        assert "- Blue widget\n- Red widget" in result.content
        for hidden in ("SCRIPT-TEXT", "NAV-TEXT", "color: red", "<p>"):
            assert hidden not in result.content
        assert result.meta["title"] == "Widget Guide"
        assert result.meta["mode"] == "text"
        assert result.meta["content_type"] == "text/html"
        assert len(ARTICLE_HTML) == result.meta["bytes"]
        assert result.meta["status"] == 200

    def test_markdown_marks_headings_links_and_emphasis(self) -> None:
        """mode=markdown gives headings, absolute links and emphasis."""
        content, meta = shape_body(html_body(), Options(mode="markdown"))

        assert content.startswith("# Widgets\n\n")
        assert "## Kinds" in content
        assert "**small**" in content
        assert "[the docs](http://site.example/docs)" in content
        assert meta["mode"] == "markdown"

    def test_html_and_raw_return_the_source(self) -> None:
        """mode=html and mode=raw return the page's source."""
        for mode in ("html", "raw"):
            content, _ = shape_body(html_body(), Options(mode=mode))

            assert ARTICLE_HTML.decode() == content

    def test_hidden_elements_left_open_end_at_the_next_sibling(self) -> None:
        """A hidden <p> or <li> without its end tag hides only itself."""
        page = b"<p hidden>secret<p>visible one<ul><li aria-hidden=true>x<li>y</ul>"

        content, _ = shape_body(Body(page, "text/html", None, "http://x.example/"), Options())

        assert content == "visible one\n\n- y\n"

    def test_charset_from_meta_tag(self) -> None:
        """Without a charset header, the page's <meta charset> decides the decoding."""
        page = '<meta charset="iso-8859-1"><p>Caf\xe9</p>'.encode("latin-1")

        content, _ = shape_body(Body(page, "text/html", None, "http://x.example/"), Options())

        assert content == "Café\n"


class TestJson:
    async def test_jq_applies_to_json(self, site: LocalServer) -> None:
        """jq runs on a JSON response; each result is one line of JSON."""
        result = await fetch_from(site, "/data.json", Options(jq=".items[] | .name"))

        assert result.content == '"alpha"\n"beta"\n'
        assert result.meta["jq_results"] == 2

    async def test_json_without_jq_is_the_document(self, site: LocalServer) -> None:
        """Without jq a JSON response is returned as it is."""
        result = await fetch_from(site, "/data.json", Options())

        assert {"items", "total"} == set(json.loads(result.content))

    def test_jq_runtime_error_is_a_422(self) -> None:
        """A jq program that fails on the document says why."""
        body = Body(DATA_JSON, "application/json", None, "http://x.example/")

        with pytest.raises(TargetError) as info:
            shape_body(body, Options(jq=".items.name"))

        assert info.value.status == 422
        assert info.value.msg.startswith("the jq program failed on this document: Cannot index")

    def test_jq_on_invalid_json(self) -> None:
        """jq on a body that is not JSON says so."""
        body = Body(b"{oops", "application/json", None, "http://x.example/")

        with pytest.raises(TargetError, match=r"^the response is not valid JSON"):
            shape_body(body, Options(jq="."))


class TestPdf:
    async def test_pages_selects_pages_and_reports_the_count(self, site: LocalServer) -> None:
        """pages picks PDF pages; meta has the page count and the pages returned."""
        result = await fetch_from(site, "/report.pdf", Options(pages="2-3"))

        assert "[page 2]" in result.content
        assert "revenue grew by ten percent" in result.content
        assert "outlook for next year" in result.content
        assert "Annual report" not in result.content
        assert result.meta["page_count"] == 3
        assert result.meta["pages"] == [2, 3]

    async def test_whole_pdf_by_default(self, site: LocalServer) -> None:
        """A PDF without pages= gives every page."""
        result = await fetch_from(site, "/report.pdf", Options(mode="markdown"))

        assert "## Page 1" in result.content
        assert "## Page 3" in result.content
        assert result.meta["pages"] == [1, 2, 3]

    def test_pages_beyond_the_document_is_a_416_with_the_count(self) -> None:
        """Asking only for pages the PDF does not have says how many it has."""
        body = Body(make_pdf(REPORT_PAGES), "application/pdf", None, "http://x.example/r.pdf")

        with pytest.raises(TargetError) as info:
            shape_body(body, Options(pages="7-9"))

        assert info.value.status == 416
        assert "the PDF has 3 pages" in info.value.msg
        assert "pages=1-3" in info.value.hint

    def test_broken_pdf_is_a_422(self) -> None:
        """A body that is not a readable PDF is a clear error."""
        body = Body(b"%PDF-1.4\nnothing here", "application/pdf", None, "http://x.example/")

        with pytest.raises(TargetError, match=r"^the PDF could not be read"):
            shape_body(body, Options())


class TestGrep:
    def test_only_matching_lines(self) -> None:
        """grep keeps the matching lines and counts them."""
        content, meta = shape_body(html_body(), Options(grep="(?i)euros?"))

        assert content == "A blue widget costs 3 euros; a red widget costs 5 euros.\n"
        assert meta["matches"] == 1

    def test_context_adds_neighbouring_lines(self) -> None:
        """context=true adds two lines around each match, groups split by --."""
        text = "\n".join(f"line {i}" for i in range(1, 21)).encode()
        body = Body(text, "text/plain", None, "http://x.example/")

        content, meta = shape_body(body, Options(grep=r"^line (5|15)$", context=True))

        assert content == (
            "line 3\nline 4\nline 5\nline 6\nline 7\n--\n"
            "line 13\nline 14\nline 15\nline 16\nline 17\n"
        )
        assert meta["matches"] == 2

    def test_catastrophic_pattern_times_out(self) -> None:
        """A pattern that backtracks forever fails in bounded time with a hint."""
        body = Body(b"a" * 5000 + b"!", "text/plain", None, "http://x.example/")

        with pytest.raises(TargetError) as info:
            shape_body(body, Options(grep="(a|aa)+$"), grep_seconds=0.05)

        assert info.value.status == 422
        assert "nested repetition" in info.value.hint


class TestQuestion:
    def test_returns_the_most_relevant_passages_with_context(self) -> None:
        """question picks the best passages by BM25; context adds neighbouring paragraphs."""
        content, meta = shape_body(
            html_body(), Options(question="How much does a red widget cost?")
        )

        assert "A blue widget costs 3 euros; a red widget costs 5 euros." in content
        assert "Prices" in content
        passages, paragraphs = meta["passages"], meta["paragraphs"]
        assert isinstance(passages, list)
        assert isinstance(paragraphs, int)
        assert passages[0]["paragraph"] >= 1
        assert paragraphs > 5

    def test_without_context_only_the_passages(self) -> None:
        """context=false returns the passages alone."""
        content, _meta = shape_body(
            html_body(), Options(question="what ruins widgets stored outdoors", context=False)
        )

        assert content.startswith("Keep widgets dry. Rust ruins a widget")
        assert "Prices" not in content

    def test_no_relevant_passage_is_empty(self) -> None:
        """A question the page does not touch gives no passages, not an error."""
        content, meta = shape_body(html_body(), Options(question="zebra migration"))

        assert content == ""
        assert meta["passages"] == []


class TestApplicability:
    @pytest.mark.parametrize(
        ("path", "options", "fragment"),
        [
            ("/guide", Options(jq=".x"), "jq applies to JSON responses; this response is an HTML"),
            ("/guide", Options(pages="1"), "pages applies to PDF documents"),
            ("/data.json", Options(mode="html"), "mode=html applies to HTML pages"),
            ("/data.json", Options(mode="markdown"), "mode=markdown does not apply to JSON"),
            ("/report.pdf", Options(mode="raw"), "mode=raw does not apply to a PDF"),
        ],
    )
    async def test_option_for_another_type_is_a_422(
        self, site: LocalServer, path: str, options: Options, fragment: str
    ) -> None:
        """An option that does not fit the content type says so."""
        with pytest.raises(TargetError) as info:
            await fetch_from(site, path, options)

        assert info.value.status == 422
        assert fragment in info.value.msg

    async def test_unsupported_type_is_a_415(self, site: LocalServer) -> None:
        """An image cannot become text: a 415 with a hint."""
        with pytest.raises(TargetError) as info:
            await fetch_from(site, "/logo.png", Options())

        assert info.value.status == 415
        assert "image/png" in info.value.msg
        assert "HTML, text, JSON and PDF" in info.value.hint

    def test_untyped_bodies_are_sniffed(self) -> None:
        """A body without a useful content type is recognised by its bytes."""
        pdf = Body(make_pdf(["only page"]), "application/octet-stream", None, "http://x/")
        _, meta = shape_body(pdf, Options())

        assert meta["page_count"] == 1
