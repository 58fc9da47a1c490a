"""PDF text in reading order, and the title, on small PDFs drawn line by line."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import pypdf
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from trio_batch import Options
from trio_batch.web import shape


def pdf(lines: Sequence[tuple[float, float, str]], *, title: str | None = None) -> bytes:
    """A one-page PDF (612x792) that draws each ``(x, y, text)`` in the order given."""
    writer = pypdf.PdfWriter()  # _add_object: pypdf has no public way to add a stream
    page = writer.add_blank_page(612, 792)
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    page[NameObject("/Resources")] = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})}
    )
    ops = "".join(f"BT /F1 10 Tf 1 0 0 1 {x} {y} Tm ({text}) Tj ET\n" for x, y, text in lines)
    stream = DecodedStreamObject()
    stream.set_data(ops.encode("latin-1"))
    page[NameObject("/Contents")] = writer._add_object(stream)
    if title is not None:
        writer.add_metadata({"/Title": title})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def text_of(data: bytes) -> tuple[str, dict[str, object]]:
    result = shape(
        data, url="https://a.example/d.pdf", content_type="application/pdf", options=Options()
    )
    return result.content, result.meta


class TestReadingOrder:
    def test_a_box_drawn_last_comes_back_in_place(self) -> None:
        """Lines drawn after the text below them (Chromium's positioned boxes) are read where
        they stand on the page."""
        data = pdf(
            [
                (72, 700, "For example:"),
                (72, 600, "After the example."),
                (80, 660, ">>> print(1)"),
                (80, 645, "1"),
            ]
        )

        assert text_of(data)[0] == "[page 1]\n\nFor example:\n>>> print(1)\n1\nAfter the example.\n"

    def test_rows_drawn_bottom_up_read_top_down(self) -> None:
        """A table drawn from its last row up is read from its first row down; the words of
        one row stay as pypdf joins them."""
        data = pdf([(72, 680, "a"), (300, 680, "3"), (72, 700, "Name"), (300, 700, "Size")])

        assert text_of(data)[0] == "[page 1]\n\nName Size\na 3\n"

    def test_two_columns_keep_the_file_order(self) -> None:
        """A page whose lines start in both halves is two columns: the file's order stays,
        so the columns are not interleaved."""
        left = [(72, 700 - 20 * i, f"left {i}") for i in range(6)]
        right = [(320, 700 - 20 * i, f"right {i}") for i in range(6)]

        lines = text_of(pdf(left + right))[0].split("\n")[2:-1]

        assert lines == [f"left {i}" for i in range(6)] + [f"right {i}" for i in range(6)]


class TestTitle:
    def test_title_from_the_metadata(self) -> None:
        """meta.title is the document's /Title."""
        data = pdf([(72, 700, "Heading")], title="The  Report ")

        assert text_of(data)[1]["title"] == "The Report"

    def test_title_from_the_first_line(self) -> None:
        """Without a /Title, meta.title is the first line of page 1."""
        data = pdf([(72, 700, "Quarterly numbers"), (72, 680, "Body.")])

        assert text_of(data)[1]["title"] == "Quarterly numbers"


class TestLigatures:
    def test_chromium_ligatures_come_back_as_letters(self) -> None:
        """A Chromium-printed PDF (DejaVu Sans) draws "fi" and "ffi" as ligature glyphs, which
        pypdf reads as U+FB01 and U+FB03: the text has the plain letters, so grep finds them."""
        data = (Path(__file__).parent / "fixtures" / "chromium-ligatures.pdf").read_bytes()
        assert "\ufb01" in pypdf.PdfReader(io.BytesIO(data)).pages[0].extract_text()

        content, _ = text_of(data)

        assert "file: the office finds fifty files" in content
        assert not {"\ufb01", "\ufb03"} & set(content)
