"""Main content (issue 37): what an agent asked for, without the page's chrome, on by default
for text, Markdown and the ``html`` format; ``main_content: false`` keeps the whole page."""

from __future__ import annotations

import pytest

from trio_batch import Options, TargetError
from trio_batch.web import shape, validate_options

URL = "https://news.example/2026/05/story.html"
PROSE = (
    "The council met on Tuesday, as it does each month, and voted on the new timetable, "
    "which moves the last train to a quarter past midnight."
)


def text(html: str, **options: object) -> str:
    result = shape(html.encode(), url=URL, content_type="text/html", options=Options(**options))  # type: ignore[arg-type]
    return result.content


def article(body: str) -> str:
    """A news page: a site header and menu, a sidebar, related stories, comments, a cookie
    banner and a footer around ``body``."""
    return f"""<!doctype html><html><head><title>Trains</title></head><body>
<div class="cookie-banner"><p>We use cookies to improve your experience, accept them all.</p></div>
<header class="site-header"><a href="/">Daily Example</a>
  <p>Your trusted news since 1901.</p></header>
<nav><ul><li><a href="/world">World</a></li><li><a href="/sport">Sport</a></li></ul></nav>
<div class="layout">
  <div class="story-column">{body}</div>
  <div class="sidebar"><h3>Most read</h3>
    <p>A very popular story about something else entirely, with many words in it.</p></div>
</div>
<div class="related-stories"><h3>Related</h3><ul>
  <li><a href="/a">Another story about trains and timetables in the city</a></li>
  <li><a href="/b">Yet another story about the council and its many votes</a></li></ul></div>
<section id="comments"><h3>12 comments</h3>
  <p>I have always said the last train is too early, and now they listen, finally.</p></section>
<footer><p>Copyright 2026 Daily Example. All rights reserved.</p></footer>
</body></html>"""


STORY = f"""<h1>Last train moves to 00:15</h1>
<p>{PROSE}</p>
<h2>What changes</h2>
<ul><li>Weekday service ends later.</li><li>Sunday service is unchanged.</li></ul>
<table><tr><th>Line</th><th>Last train</th></tr><tr><td>North</td><td>00:15</td></tr></table>
<pre><code>curl https://news.example/api/timetable</code></pre>
<figure><img src="train.jpg" alt="A train">
  <figcaption>The 00:15 to North Park.</figcaption></figure>
<p>{PROSE.replace("Tuesday", "Wednesday")}</p>"""


class TestChoosing:
    def test_the_story_without_the_chrome_around_it(self) -> None:
        """A page with no <main> or <article>: the block of prose is the content; the site
        header, menu, sidebar, related stories, comments, cookie banner and footer are not."""
        content = text(article(STORY))

        assert PROSE in content
        for chrome in (
            "cookies",
            "trusted news",
            "Sport",
            "Most read",
            "Another story",
            "too early",
            "Copyright",
        ):
            assert chrome not in content

    def test_what_matters_inside_the_story_is_kept(self) -> None:
        """Headings, lists, tables, code and figure captions inside the content stay, in
        Markdown as in text."""
        content = text(article(STORY), mode="markdown")

        for kept in (
            "# Last train moves to 00:15",
            "## What changes",
            "- Weekday service",
            "| North | 00:15 |",
            "curl https://news.example/api/timetable",
            "The 00:15 to North Park.",
        ):
            assert kept in content

    def test_main_content_false_keeps_the_whole_page(self) -> None:
        """``main_content: false`` gives the page as before: the sidebar, the related stories
        and the comments are there again."""
        content = text(article(STORY), main_content=False)

        assert PROSE in content
        for chrome in ("Most read", "Another story", "too early"):
            assert chrome in content

    def test_an_article_element_that_holds_the_text_is_the_content(self) -> None:
        """A semantic <article> holding most of the text is the content, even when its
        wrappers' classes name chrome (a "sidebar-layout" panel)."""
        page = article(f'<div class="panel sidebar-layout"><article>{STORY}</article></div>')

        content = text(page)

        assert PROSE in content
        assert "Most read" not in content

    def test_share_and_promo_blocks_inside_the_story_are_dropped(self) -> None:
        """Inside the content, a share bar, a newsletter box, an aside and a promotion go; a
        footnote aside stays."""
        body = (
            f"<article><p>{PROSE}</p><div class='share-buttons'>Share on Twitter</div>"
            "<div class='newsletter-signup'>Get our newsletter every morning</div>"
            "<aside><p>Read also: the bus timetable</p></aside>"
            "<div class='promo'>Subscribe for 1 euro</div>"
            "<aside class='footnote'><p>1. Times are local.</p></aside></article>"
        )

        content = text(article(body))

        assert PROSE in content
        assert "Times are local." in content
        for chrome in ("Share on", "newsletter", "Read also", "1 euro"):
            assert chrome not in content

    def test_a_document_written_straight_into_the_body_stays_whole(self) -> None:
        """A page whose text stands directly in <body> (a man page, a tutorial) keeps every
        block: the best container is the body, so nothing is left out."""
        page = (
            "<html><body><h1>socat</h1>"
            + "".join(f"<p>{PROSE} Part {i}.</p><pre>socat - TCP:host:{i}</pre>" for i in range(6))
            + "<dl><dt>-d</dt><dd>Prints fatal, error and warning messages.</dd></dl></body></html>"
        )

        assert text(page) == text(page, main_content=False)

    def test_a_page_whose_containers_all_score_below_zero_is_kept_whole(self) -> None:
        """When every container of the text scores below zero (their classes all name
        chrome), the page is shaped whole instead of failing."""
        page = (
            "<html><body>"
            + "<div class='comment-meta'>" * 6
            + f"<p>{PROSE}</p>"
            + "</div>" * 6
            + "</body></html>"
        )

        assert text(page) == text(page, main_content=False)

    def test_text_written_in_divs_is_found(self) -> None:
        """A story written in ``<div>``s, not ``<p>``s (as some news sites do), is found by
        its own text, not lost to a short promo that has a ``<p>``."""
        paragraphs = "".join(
            f"<div class='zn-body__paragraph'>{PROSE} Part {i}.</div>" for i in range(8)
        )
        page = article(
            f"<div class='messenger-content'><p>{PROSE[:60]}</p></div>"
            f"<div class='l-container'>{paragraphs}</div>"
        )

        content = text(page)

        assert all(f"Part {i}." in content for i in range(8))

    def test_documentation_sections_named_like_chrome_are_kept(self) -> None:
        """A section whose id comes from its title (``http.cookiejar``, ``email.header``) is
        not chrome: only whole ids such as ``comments`` or ``sidebar`` are."""
        page = (
            "<html><body><div role='main'>"
            f"<section id='module-http.cookiejar'><h1>http.cookiejar</h1><p>{PROSE}</p></section>"
            f"<section id='header-objects'><h2>Header objects</h2><p>{PROSE} Again.</p></section>"
            "</div></body></html>"
        )

        content = text(page)

        assert "http.cookiejar" in content
        assert "Header objects" in content


class TestFormats:
    def test_the_html_format_is_the_cleaned_main_content(self) -> None:
        """The html format holds the story, not the sidebar; links still list the whole
        page's links, menus included (an agent mapping a site wants them)."""
        result = shape(
            article(STORY).encode(),
            url=URL,
            content_type="text/html",
            options=Options(formats=("html", "links")),
        )

        assert PROSE in result.content
        assert "Most read" not in result.content
        assert "hidden" not in result.content
        links = result.meta["links"]
        assert isinstance(links, list)
        urls = [link["url"] for link in links]
        assert "https://news.example/sport" in urls

    def test_the_html_format_leaves_out_the_chrome_inside_the_story(self) -> None:
        """The html format drops a share bar inside the story, as the text does, and keeps
        the rest of the story."""
        body = f"<article><p>{PROSE}</p><div class='share-buttons'>Share on Twitter</div></article>"

        result = shape(
            article(body).encode(),
            url=URL,
            content_type="text/html",
            options=Options(formats=("html",)),
        )

        assert PROSE in result.content
        assert "Share on" not in result.content

    def test_the_html_format_with_main_content_false_is_the_whole_page(self) -> None:
        """``main_content: false`` gives the cleaned whole page in the html format."""
        result = shape(
            article(STORY).encode(),
            url=URL,
            content_type="text/html",
            options=Options(formats=("html",), main_content=False),
        )

        assert "Most read" in result.content

    def test_text_and_markdown_formats_agree_with_the_modes(self) -> None:
        """With formats, text and Markdown are the main content that the modes give."""
        result = shape(
            article(STORY).encode(),
            url=URL,
            content_type="text/html",
            options=Options(formats=("markdown", "text")),
        )

        assert result.content == text(article(STORY), mode="markdown")
        assert result.meta["formats"] == {"text": text(article(STORY))}


class TestImages:
    def test_an_image_whose_alt_is_an_address_writes_no_such_text(self) -> None:
        """Markdown: an image-only link whose alt text is a URL is left out, not written as
        ``[https://.../photo.jpg](...)``; a real alt text is kept."""
        body = (
            f"<article><p>{PROSE}</p>"
            "<p><a href='/video/1'><img src='p.jpg' alt='https://cdn.example/photo.jpg'></a></p>"
            "<p><a href='/video/2'><img src='q.jpg' alt='The night train'></a></p></article>"
        )

        for main in (True, False):
            content = text(article(body), mode="markdown", main_content=main)

            assert "cdn.example" not in content
            assert "[The night train](https://news.example/video/2)" in content


class TestOption:
    def test_main_content_is_on_by_default_and_stored_only_when_off(self) -> None:
        """``Options.main_content`` is True by default, left out of to_json then, and kept
        as false when turned off (so older stored options keep their key)."""
        assert Options().main_content is True
        assert "main_content" not in Options().to_json()
        assert Options(main_content=False).to_json() == {"main_content": False}
        assert Options.from_json({"main_content": False}).main_content is False

    def test_main_content_must_be_a_bool(self) -> None:
        """A main_content that is not a bool is a TypeError naming the field."""
        with pytest.raises(TypeError, match=r"^Options.main_content must be a bool \(got str\)$"):
            Options(main_content="no")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            (
                Options(mode="raw", main_content=False),
                "main_content applies to text and markdown; mode=raw is the source",
            ),
            (
                Options(formats=("links", "raw"), main_content=False),
                "main_content applies to the text, markdown and html formats, and formats "
                "lists none of them",
            ),
        ],
    )
    def test_main_content_false_where_nothing_uses_it_is_a_400(
        self, options: Options, message: str
    ) -> None:
        """Turning main content off for a shape that never uses it is a 400 with a hint."""
        with pytest.raises(TargetError) as info:
            validate_options(options)

        assert (info.value.status, info.value.msg) == (400, message)
        assert info.value.hint

    def test_the_openapi_options_describe_main_content(self) -> None:
        """The served schema has the field, as a boolean."""
        from trio_batch.http._openapi.schemas import _option

        assert _option("main_content", (bool,))["type"] == "boolean"
