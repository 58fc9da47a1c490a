"""The ``formats`` option: several shapes of one body from one fetch, ``mode`` kept as the
one-format shorthand, and the 400s and 422s of lists that do not fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_batch import Options, Target, TargetError
from trio_batch.web import WebFetcher, shape
from trio_batch.web._extract._isolate import in_process, warms_up
from trio_batch.web._extract._options import FORMATS, validate_options
from trio_batch.web._extract._shape import Body

from .support import CALLER, DATA_JSON, HTML, JSON, LOOPBACK, PDF, LocalServer, Reply, make_pdf

ARTICLE = (Path(__file__).parent / "fixtures" / "formats" / "article.html").read_bytes()
PAGE_URL = "https://site.example/start/page.html"


def page(
    options: Options, data: bytes = ARTICLE, content_type: str = "text/html"
) -> tuple[str, dict[str, object]]:
    result = shape(data, url=PAGE_URL, content_type=content_type, options=options)
    return result.content, result.meta


class TestShapes:
    def test_markdown_links_and_metadata_from_one_shape(self) -> None:
        """The content is the Markdown mode=markdown gives; links and metadata come beside it,
        with the title as before."""
        markdown, before = page(Options(mode="markdown"))

        content, meta = page(Options(formats=("markdown", "links", "metadata")))

        assert markdown == content
        assert meta["mode"] == "markdown"
        assert meta["title"] == before["title"] == "Widget Guide"
        assert isinstance(meta["links"], list)
        assert len(meta["links"]) == 6
        assert isinstance(meta["metadata"], dict)
        assert meta["metadata"]["og:title"] == "The Widget Guide"
        assert "formats" not in meta

    def test_each_other_text_format_goes_in_meta_formats(self) -> None:
        """The first text-like format is the content; text, raw and html go in meta.formats,
        text as mode=text gives it and raw as the source."""
        text, _ = page(Options(mode="text"))

        content, meta = page(Options(formats=("links", "markdown", "text", "raw", "html")))

        formats = meta["formats"]
        assert isinstance(formats, dict)
        assert content.startswith("# Widgets")
        assert ["text", "raw", "html"] == list(formats)
        assert formats["text"] == text
        assert formats["raw"] == ARTICLE.decode()

    def test_html_is_the_cleaned_main_content(self) -> None:
        """html drops what the text drops (scripts, navigation, footers), comments and every
        attribute but href, src, alt, title and spans; links and images are absolute, and a
        javascript: link loses its href."""
        content, meta = page(Options(formats=("html",)))

        assert meta["mode"] == "html"
        assert content.startswith("<h1>Widgets</h1>")
        for gone in ("SCRIPT-TEXT", "<nav", "About us", "<footer", "id=", "javascript:"):
            assert gone not in content
        assert '<a href="https://site.example/guides/care">the care page</a>' in content
        assert '<img src="https://site.example/guides/blue.png" alt="Blue widget">' in content

    def test_mode_html_is_still_the_source(self) -> None:
        """Without formats, mode=html is the page's source, as before formats existed."""
        content, meta = page(Options(mode="html"))

        assert content == ARTICLE.decode()
        assert meta == {"mode": "html"}

    def test_without_formats_meta_is_as_before(self) -> None:
        """No formats: meta holds the mode and title only, never links or metadata."""
        _, meta = page(Options(mode="markdown"))

        assert meta == {"mode": "markdown", "title": "Widget Guide"}

    def test_no_text_format_gives_empty_content(self) -> None:
        """formats with only links and metadata: the content is empty and there is no mode."""
        content, meta = page(Options(formats=("metadata",)))

        assert content == ""
        assert "mode" not in meta
        assert isinstance(meta["metadata"], dict)
        assert "links" not in meta

    def test_a_matching_mode_is_allowed(self) -> None:
        """mode may repeat the first text-like format of formats."""
        content, _ = page(Options(mode="text", formats=("links", "text")))

        assert content.startswith("Widgets")

    def test_grep_narrows_the_content_only(self) -> None:
        """grep applies to the content; the other formats stay whole."""
        content, meta = page(Options(formats=("text", "markdown"), grep="euros"))

        formats = meta["formats"]
        assert isinstance(formats, dict)
        assert content == "A blue widget costs 3 euros. Back home, or care again.\n"
        assert meta["matches"] == 1
        assert formats["markdown"].startswith("# Widgets")

    def test_json_and_text_bodies_have_empty_links_and_metadata(self) -> None:
        """A JSON document's raw text is the content; links and metadata are empty."""
        content, meta = page(
            Options(formats=("raw", "links", "metadata")), DATA_JSON, "application/json"
        )

        assert content == DATA_JSON.decode()
        assert meta["links"] == []
        assert meta["metadata"] == {}

    @pytest.mark.parametrize(
        ("formats", "data", "content_type"),
        [
            (("links",), DATA_JSON, "application/json"),
            (("metadata",), DATA_JSON, "application/json"),
            (("links", "metadata"), b"plain text", "text/plain"),
        ],
    )
    def test_links_or_metadata_alone_on_a_page_that_is_not_html(
        self, formats: tuple[str, ...], data: bytes, content_type: str
    ) -> None:
        """Links or metadata alone of a JSON or text page: empty content, empty lists, no
        error (it answered 500: an index into no text format)."""
        content, meta = page(Options(formats=formats), data, content_type)

        assert "" == content
        assert all(meta[name] in ([], {}) for name in formats)

    @pytest.mark.parametrize(
        ("formats", "data", "content_type", "message"),
        [
            (("markdown",), DATA_JSON, "application/json", "the markdown format does not apply"),
            (("text", "html"), b"plain", "text/plain", "the html format applies to HTML pages"),
            (("text", "raw"), make_pdf(["x"]), "application/pdf", "the raw format does not apply"),
        ],
    )
    def test_a_format_that_does_not_fit_the_body_is_a_422(
        self, formats: tuple[str, ...], data: bytes, content_type: str, message: str
    ) -> None:
        """Every text-like format must fit the body, as mode must; the error names it."""
        with pytest.raises(TargetError) as info:
            page(Options(formats=formats), data, content_type)

        assert info.value.status == 422
        assert info.value.msg.startswith(message)
        assert info.value.hint

    def test_pdf_text_and_markdown_from_one_read(self) -> None:
        """A PDF's pages in Markdown (## Page N) as content and in text ([page N]) beside."""
        content, meta = page(
            Options(formats=("markdown", "text")), make_pdf(["one", "two"]), "application/pdf"
        )

        assert content == "## Page 1\n\none\n\n## Page 2\n\ntwo\n"
        assert meta["formats"] == {"text": "[page 1]\n\none\n\n[page 2]\n\ntwo\n"}


class TestOptions:
    def test_formats_are_stored_only_when_set(self) -> None:
        """Options without formats keep the JSON (and so the idempotency key) they had; with
        formats, they are an array that reads back as the same options."""
        wire: list[str] = ["markdown", "links"]  # as the HTTP API's JSON gives it
        options = Options(formats=wire)  # type: ignore[arg-type]

        assert Options(mode="markdown").to_json() == {"mode": "markdown"}
        assert options.to_json() == {"formats": ["markdown", "links"]}
        assert Options.from_json(options.to_json()) == options
        assert options.formats == ("markdown", "links")

    def test_a_format_list_that_is_not_strings_is_a_type_error(self) -> None:
        """Options refuses a formats value that is a string or holds a non-string."""
        with pytest.raises(TypeError, match=r"^Options.formats must be a sequence of strings"):
            Options(formats="markdown")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^Options.formats must be a sequence of strings"):
            Options(formats=("markdown", 3))  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (Options(formats=("pdf",)), "formats has an unknown format 'pdf'"),
            (Options(formats=("links", "links")), "formats lists 'links' twice"),
            (Options(formats=("text",) * 7), "formats lists 7 names; at most 6"),
            (
                Options(mode="text", formats=("markdown", "text")),
                "mode=text contradicts formats, whose content is markdown",
            ),
            (
                Options(mode="markdown", formats=("links",)),
                "mode=markdown contradicts formats, whose content is none (no text-like format)",
            ),
            (
                Options(formats=("links",), grep="x"),
                "grep narrows the content, and formats asks for none",
            ),
            (
                Options(formats=("metadata",), question="when?"),
                "question narrows the content, and formats asks for none",
            ),
            (
                Options(formats=("raw",), jq=".a"),
                "jq and formats cannot be used together: jq shapes a JSON response, formats a page",
            ),
        ],
    )
    def test_lists_that_do_not_make_sense_are_a_400(self, options: Options, message: str) -> None:
        """Each refused list is a 400 that names the problem, with a hint."""
        with pytest.raises(TargetError) as info:
            validate_options(options)

        assert info.value.status == 400
        assert info.value.msg == message
        assert info.value.hint

    def test_the_openapi_options_list_the_same_formats(self) -> None:
        """The API's schema (and so the MCP tools' input schemas) names every format, once."""
        from trio_batch.http._openapi.schemas import OPTIONS

        properties = OPTIONS["properties"]
        assert isinstance(properties, dict)
        schema = properties["formats"]

        assert schema["type"] == "array"
        assert list(FORMATS) == schema["items"]["enum"]
        assert len(FORMATS) == schema["maxItems"]

    def test_a_hostile_format_name_is_cut_in_the_message(self) -> None:
        """An unknown name of 4,000 characters is quoted short."""
        with pytest.raises(TargetError) as info:
            validate_options(Options(formats=("x" * 4000,)))

        assert len(info.value.msg) < 100


class TestWhereItRuns:
    @pytest.mark.parametrize(
        ("formats", "worker"),
        [(("raw",), False), (("raw", "links"), True), (("metadata",), True), (("html",), True)],
    )
    def test_html_formats_that_parse_go_to_a_worker(
        self, formats: tuple[str, ...], worker: bool
    ) -> None:
        """Any format that parses HTML runs in a shaping worker (and warms one up); the
        source alone stays in the service's thread."""
        options = Options(formats=formats)
        body = Body(ARTICLE, "text/html", None, PAGE_URL)

        assert in_process(body, options) is not worker
        assert warms_up(options) is worker


class TestFetch:
    async def test_one_fetch_gives_markdown_links_and_metadata(self, server: LocalServer) -> None:
        """Through WebFetcher and its shaping workers, against a local site: one fetch gives
        the Markdown, the links made absolute against the final URL and <base href>, and the
        page's metadata, beside the usual meta."""
        server.route("/start/page.html", Reply(body=ARTICLE, headers=HTML))
        options = Options(formats=("markdown", "links", "metadata"))

        async with WebFetcher(allow=LOOPBACK) as fetch:
            result = await fetch(CALLER, Target(server.url("/start/page.html"), options))

        meta = result.meta
        links = meta["links"]
        assert result.content.startswith("# Widgets")
        assert meta["status"] == 200
        assert meta["mode"] == "markdown"
        assert links[0] == {"url": server.url("/"), "text": "Home", "internal": True}
        assert links[2]["url"] == server.url("/guides/care")
        assert not links[3]["internal"]
        assert meta["metadata"]["canonical"] == server.url("/guides/widgets?ref=canonical")
        assert meta["metadata"]["published"] == "2026-01-02T03:04:05Z"

    async def test_a_pdf_gives_its_document_info(self, server: LocalServer) -> None:
        """A PDF fetched with metadata gives its page count (and info when it has one)."""
        server.route("/r.pdf", Reply(body=make_pdf(["a", "b", "c"]), headers=PDF))

        async with WebFetcher(allow=LOOPBACK) as fetch:
            result = await fetch(
                CALLER, Target(server.url("/r.pdf"), Options(formats=("text", "metadata")))
            )

        assert result.content.startswith("[page 1]")
        assert result.meta["metadata"] == {"page_count": 3}

    async def test_json_with_formats(self, server: LocalServer) -> None:
        """A JSON URL fetched with formats gives its text and empty links."""
        server.route("/d.json", Reply(body=DATA_JSON, headers=JSON))

        async with WebFetcher(allow=LOOPBACK) as fetch:
            result = await fetch(
                CALLER, Target(server.url("/d.json"), Options(formats=("text", "links")))
            )

        assert result.content == DATA_JSON.decode()
        assert result.meta["links"] == []
