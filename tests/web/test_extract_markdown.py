"""Each Markdown fix of issue 13, on the smallest page that shows it, through ``shape``."""

from __future__ import annotations

import pytest

from trio_batch import Options, TargetError
from trio_batch.web import shape


def md(html: str) -> str:
    result = shape(
        html.encode(),
        url="https://a.example/d/",
        content_type="text/html",
        options=Options(mode="markdown"),
    )
    return result.content


def text(html: str) -> str:
    return shape(
        html.encode(), url="https://a.example/d/", content_type="text/html", options=Options()
    ).content


class TestPermalinks:
    def test_sphinx_headerlink_is_dropped(self) -> None:
        """Sphinx's ¶ anchor after a heading is not part of the heading."""
        html = (
            '<h2>Menus<a class="headerlink" href="#menus" title="Link to this heading">¶</a></h2>'
        )

        assert md(html) == "## Menus\n"

    def test_node_mark_is_dropped(self) -> None:
        """Node.js docs' # mark after a heading is not part of it."""
        html = '<h2>DNS<span><a class="mark" href="#dns" id="dns">#</a></span></h2>'

        assert (md(html), text(html)) == ("## DNS\n", "DNS\n")

    def test_texinfo_copiable_anchor_is_dropped(self) -> None:
        """Texinfo's ¶ anchor after a heading or a definition is not part of it."""
        html = (
            '<h3 class="section"><span>2.1 Basics<a class="copiable-anchor" href="#Basics">'
            " &para;</a></span></h3><dl><dt><span><code>ffi_type_void</code>"
            "<a href='#index-void' class='copiable-anchor'> &para;</a></span></dt></dl>"
        )

        assert (md(html), text(html)) == (
            "### 2.1 Basics\n\n`ffi_type_void`\n",
            "2.1 Basics\n\nffi_type_void\n",
        )


class TestCode:
    def test_no_markup_inside_a_fence(self) -> None:
        """Bold and links inside <pre> come out as plain text, with no blank first line."""
        html = '<pre>\n<strong>item  </strong> ::= <a href="#size"><code>size</code></a>+</pre>'

        assert md(html) == "```\nitem   ::= size+\n```\n"

    def test_no_markup_inside_inline_code(self) -> None:
        """Emphasis inside <code> is dropped, the code span stays."""
        assert md("<p>Call <code><em>f</em>(x)</code>.</p>") == "Call `f(x)`.\n"

    def test_sibling_code_blocks_each_get_a_fence(self) -> None:
        """Two <code> in one <pre> (Node's ESM and CJS variants) are two code blocks."""
        html = (
            '<pre><code class="language-js mjs">import a from "a";</code>'
            '<code class="language-js cjs">const a = require("a");</code></pre>'
        )

        assert md(html) == '```js\nimport a from "a";\n```\n\n```js\nconst a = require("a");\n```\n'
        assert text(html) == 'import a from "a";\n\nconst a = require("a");\n'

    def test_inline_code_inside_pre_stays_in_the_block(self) -> None:
        """<code> elements among the text of a <pre> (Sphinx grammar blocks) are part of its
        one block, however many there are."""
        html = "<pre>x = 1\ny = <code>f</code>(2)\nz = <code>g</code>(3)\n</pre>"

        assert md(html) == "```\nx = 1\ny = f(2)\nz = g(3)\n```\n"
        assert text(html) == "x = 1\ny = f(2)\nz = g(3)\n"

    def test_sphinx_grammar_block_is_one_block(self) -> None:
        """A Sphinx productionlist, with linked and bare <code> names, is one fenced block."""
        html = (
            "<pre><strong id=\"g-match_stmt\">match_stmt  </strong> ::=  'match' "
            '<a href="#g-subject_expr"><code class="xref"><span class="pre">subject_expr</span>'
            '</code></a> ":" <code class="xref"><span class="pre">block</span></code>\n'
            '<strong id="g-subject_expr">subject_expr</strong> ::=  <code class="xref">'
            '<span class="pre">a</span></code> "," <code class="xref">b</code>?\n</pre>'
        )

        assert md(html) == (
            "```\nmatch_stmt   ::=  'match' subject_expr \":\" block\n"
            'subject_expr ::=  a "," b?\n```\n'
        )

    def test_sphinx_highlight_gives_the_language(self) -> None:
        """A Sphinx highlight-LANG wrapper names the fence's language."""
        html = (
            '<div class="highlight-pycon"><div class="highlight">'
            "<pre><span>&gt;&gt;&gt; 1</span></pre></div></div>"
        )

        assert md(html) == "```pycon\n>>> 1\n```\n"

    def test_code_with_backticks_uses_a_longer_mark(self) -> None:
        """Inline code that holds a backtick is wrapped in double backticks."""
        assert md("<p><code>a`b</code></p>") == "`` a`b ``\n"


class TestEmphasis:
    @pytest.mark.parametrize(
        ("html", "expected"),
        [
            ('<em class="property">exception </em>copy.Error', "*exception* copy.Error\n"),
            ("in <strong> both </strong>directions", "in **both** directions\n"),
            ("a<em> </em>b", "a b\n"),
            ("a<b></b>b", "ab\n"),
        ],
    )
    def test_space_goes_outside_the_marks(self, html: str, expected: str) -> None:
        """Emphasis never starts or ends with a space; an empty one leaves no marks."""
        assert md(f"<p>{html}</p>") == expected

    def test_literal_stars_are_escaped(self) -> None:
        """A star in the text is not read as emphasis."""
        assert md("<p>start+2*step, a * b</p>") == "start+2\\*step, a \\* b\n"

    def test_emphasis_across_blocks_is_closed_in_the_first(self) -> None:
        """Bold around two paragraphs is closed where the first ends, never left open (nor
        repeated in every block, which unclosed tags could multiply)."""
        assert md("<b><p>one</p><p>two</p></b>") == "**one**\n\ntwo\n"

    def test_block_link_keeps_its_first_block(self) -> None:
        """A link around a card (heading and text) links the heading."""
        html = '<a href="/w"><h3>Widgets</h3><p>All of them.</p></a>'

        assert md(html) == "### [Widgets](https://a.example/w)\n\nAll of them.\n"


class TestEscaping:
    @pytest.mark.parametrize(
        ("html", "expected"),
        [
            ("<p>new[](size_t)</p>", "new[\\](size_t)\n"),
            ("<p>[text](url) and f[i]<span>(x)</span></p>", "[text\\](url) and f[i\\](x)\n"),
            ("<p># not a heading</p>", "\\# not a heading\n"),
            ("<p>1. not a list</p>", "1\\. not a list\n"),
            ("<p>2) not a list</p>", "2\\) not a list\n"),
            ("<p>- not a list</p>", "\\- not a list\n"),
            ("<p>+ not a list</p>", "\\+ not a list\n"),
            ("<p>&gt; not a quote</p>", "\\> not a quote\n"),
            ("<p>---</p>", "\\---\n"),
            ("<p>___</p><p>_ _ _</p>", "\\___\n\n\\_ _ _\n"),
            ("<p>&amp;copy; is not ©</p>", "\\&copy; is not ©\n"),
            ("<p>```not a fence</p>", "\\`\\`\\`not a fence\n"),
            ("<p>type `show w' or <code>c</code></p>", "type \\`show w' or `c`\n"),
            ("<p>&lt;div&gt; is not HTML</p>", "\\<div> is not HTML\n"),
            ("<p><span>&lt;default</span> <span>timer&gt;</span></p>", "\\<default timer>\n"),
            ("<p>[1]: not a definition</p>", "\\[1]: not a definition\n"),
            ("<p>one<br># two<br>- three<br>===</p>", "one\n\\# two\n\\- three\n\\===\n"),
            ("<p><code>a<br>&gt; b</code></p>", "`a > b`\n"),
            ("<ul><li>- dash</li><li>1. one</li></ul>", "- \\- dash\n- 1\\. one\n"),
            ("<h2>Item #</h2>", "## Item \\#\n"),
            ("<blockquote><p>&gt; q</p></blockquote>", "> \\> q\n"),
            (
                "<p>_private_ and __init__ but snake_case</p>",
                "\\_private\\_ and \\_\\_init\\_\\_ but snake_case\n",
            ),
            ("<p><span>_a</span> b_</p>", "_a b\\_\n"),
            ("<p>_a <em>b</em> c_</p>", "_a *b* c\\_\n"),
            ("<p>C:\\dir\\*.txt</p>", "C:\\dir\\\\\\*.txt\n"),
            ('<p>Wow!<a href="/x">here</a></p>', "Wow\\![here](https://a.example/x)\n"),
            ("<p>std::vector&lt;int&gt;</p>", "std::vector\\<int>\n"),
        ],
    )
    def test_literal_text_is_not_markup(self, html: str, expected: str) -> None:
        """Text that CommonMark would read as a link, heading, list, quote, fence, emphasis
        or HTML is escaped, and reads the same once rendered."""
        assert md(html) == expected

    def test_ordinary_text_is_not_escaped(self) -> None:
        """Words, numbers, signs inside a line, link targets and code stay as they are."""
        html = (
            "<p>Version 2.0 - see "
            '<a href="/a_b/c[1]_(x)">the_docs #1</a>, C# and a &gt; b, 3 + 4 = 7, '
            "a_b_c, x[0], f(x) [note] &lt; 3 and 100%.</p>"
            "<p>_name alone, a _ b.</p><p>x_ then _y.</p><h2># 1. Intro</h2>"
            "<p><code>[](x) _a_ # y</code></p><pre># x\n- y\n[](z) _a_</pre>"
        )

        assert md(html) == (
            "Version 2.0 - see [the_docs #1](https://a.example/a_b/c[1]_(x)), C# and a > b, "
            "3 + 4 = 7, a_b_c, x[0], f(x) [note] < 3 and 100%.\n\n"
            "_name alone, a _ b.\n\nx_ then _y.\n\n## # 1. Intro\n\n"
            "`[](x) _a_ # y`\n\n```\n# x\n- y\n[](z) _a_\n```\n"
        )

    def test_text_mode_is_not_escaped(self) -> None:
        """Escapes are Markdown's: plain text keeps the characters as they are."""
        assert text("<p># [](x) _a_ 1. - &gt;</p>") == "# [](x) _a_ 1. - >\n"


class TestLinks:
    def test_image_only_link_uses_the_alt_text(self) -> None:
        """An image link keeps the image's alt text as its text."""
        assert (
            md('<a href="next.html"><img src="r.png" alt="Next"></a>')
            == "[Next](https://a.example/d/next.html)\n"
        )

    def test_image_link_without_alt_is_dropped(self) -> None:
        """An image link without alt text leaves no empty []()."""
        assert md('<p>x <a href="feed/"><img src="rss.png" alt=""></a></p>') == "x\n"


class TestBoilerplate:
    @pytest.mark.parametrize(
        "html",
        [
            '<div class="sphinxsidebar"><h4>Previous topic</h4></div>',
            '<div class="related"><a href="i.html">index</a></div>',
            '<div class="footer">Created using Sphinx 7.2.6.</div>',
            "<footer>Proudly powered by WordPress</footer>",
            '<div role="contentinfo">© 2026</div>',
            '<aside role="complementary"><h2>Recent Posts</h2></aside>',
            '<div role="search"><h3>Quick search</h3></div>',
            '<table class="navigation"><tr><td><a href="p.html">Prev</a></td><td>Up</td></tr>'
            "</table>",
            '<table class="nav" summary="Navigation header"><tr><td><a accesskey="p" '
            'href="i.html"><img src="prev.png" alt="Prev"></a></td><th>Valgrind User Manual</th>'
            '<td><a accesskey="n" href="n.html"><img src="next.png" alt="Next"></a></td></tr>'
            "</table>",
            '<table class="nav" summary="Navigation footer"><tr><td rowspan="2">'
            '<a accesskey="p" href="i.html">&lt;&lt; 1. Introduction</a></td>'
            '<td><a accesskey="u" href="m.html">Up</a></td><td rowspan="2">'
            '<a accesskey="n" href="n.html">3. Advanced &gt;&gt;</a></td></tr>'
            '<tr><td><a accesskey="h" href="index.html">Home</a></td></tr></table>',
        ],
    )
    def test_page_chrome_is_dropped(self, html: str) -> None:
        """Sidebars, footers, search boxes and navigation bars are not content."""
        assert md(f"<main><p>Body.</p>{html}</main>") == "Body.\n"

    def test_a_quote_keeps_its_footer(self) -> None:
        """A <footer> inside a quote is its attribution, and stays."""
        assert text("<blockquote><p>Q.</p><footer>Ada</footer></blockquote>") == "Q.\n\nAda\n"


class TestTables:
    def test_layout_table_cells_become_blocks(self) -> None:
        """A table whose cell holds a heading, list or code is layout: its cells are blocks."""
        html = "<table><tr><td>Menu</td><td><h1>Title</h1><pre>code</pre></td></tr></table>"

        assert md(html) == "Menu\n\n# Title\n\n```\ncode\n```\n"

    def test_spans_keep_columns_aligned(self) -> None:
        """colspan and rowspan add the empty cells that keep each row as wide as the header."""
        html = (
            '<table><tr><th rowspan="2">P</th><th colspan="2">Size</th></tr>'
            "<tr><th>max</th><th>default</th></tr><tr><td>a</td><td>1</td><td>2</td></tr></table>"
        )

        assert (
            md(html)
            == "| P | Size |  |\n| --- | --- | --- |\n|  | max | default |\n| a | 1 | 2 |\n"
        )

    def test_pipes_in_cells_are_escaped(self) -> None:
        """A | inside a cell does not split it."""
        assert md("<table><tr><td>a|b</td><td>c</td></tr></table>") == "| a\\|b | c |\n"


class TestListCode:
    def test_fence_in_an_item_is_indented_to_its_content(self) -> None:
        """A <pre> in a list item is a fence indented to the item's text, so the list goes
        on after it and the text after the list is outside any fence."""
        html = (
            "<ul><li><p>Run:</p><pre>make\nmake install</pre></li><li>next</li></ul><p>After.</p>"
        )

        assert md(html) == ("- Run:\n  ```\n  make\n  make install\n  ```\n- next\n\nAfter.\n")

    def test_fence_at_depth_two(self) -> None:
        """In an <ol> inside a <ul>, the fence and its code lines (their own indent kept)
        start where the inner item's text starts."""
        html = (
            "<ul><li>outer<ol><li><p>Run:</p><pre>make\n  install</pre></li><li>two</li>"
            "</ol></li><li>next</li></ul><p>After.</p>"
        )

        assert md(html) == (
            "- outer\n  1. Run:\n     ```\n     make\n       install\n     ```\n"
            "  2. two\n- next\n\nAfter.\n"
        )

    def test_content_column_follows_the_marker(self) -> None:
        """An item's content column is its marker's width: a fence that opens an item and
        one under "10. " line up with their item's text."""
        items = "".join(f"<li>{n}</li>" for n in range(2, 10))
        html = f"<ol><li><pre>a</pre></li>{items}<li>ten<pre>b</pre></li></ol><p>After.</p>"

        assert md(html).split("\n")[:3] + md(html).split("\n")[-7:] == [
            "1. ```",
            "   a",
            "   ```",
            "10. ten",
            "    ```",
            "    b",
            "    ```",
            "",
            "After.",
            "",
        ]

    def test_list_in_an_ordered_item(self) -> None:
        """A list inside an "1. " item starts at that item's text (three spaces), so it
        nests, and its fence lines up with its own item's text."""
        html = "<ol><li>a<ul><li>b<pre>c</pre></li></ul></li><li>d</li></ol>"

        assert md(html) == "1. a\n   - b\n     ```\n     c\n     ```\n2. d\n"

    def test_text_mode_is_unchanged(self) -> None:
        """Plain text keeps its two-space steps and the code lines as they were."""
        html = "<ol><li><p>Run:</p><pre>make\nmake install</pre></li><li>next</li></ol>"

        assert text(html) == "1. Run:\n  make\nmake install\n2. next\n"


class TestShape:
    def test_meta_and_charset(self) -> None:
        """shape() decodes with the Content-Type charset and reports the title."""
        result = shape(
            "<title>Café</title><p>Crème</p>".encode("iso-8859-1"),
            url="https://a.example/",
            content_type="text/html; charset=ISO-8859-1",
            options=Options(),
        )

        assert (result.content, result.meta) == ("Crème\n", {"mode": "text", "title": "Café"})

    def test_invalid_options_are_refused(self) -> None:
        """Options are checked as at submit: a bad one is a 400."""
        with pytest.raises(TargetError) as caught:
            shape(
                b"x",
                url="https://a.example/",
                content_type="text/plain",
                options=Options(mode="pdf"),
            )

        assert caught.value.status == 400
