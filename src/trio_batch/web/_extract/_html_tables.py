"""The state of a page's tables while the writer (``_html_writer``) gathers their rows: how
deep they are open, the cells that ``colspan`` and ``rowspan`` add (at most ``SPAN_CELLS`` a
page, so spans cannot inflate it), and which tables turned out to be layout tables."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._html_tags import SPAN_CELLS, span


@dataclass(slots=True)
class Tables:
    """The tables of the page: how deep they are open, the open row's rows and spans, and
    which of them turned out to be layout tables (whose cells become blocks). The open row's
    cells themselves are the writer's ``_cells``, where text goes."""

    depth: int = 0
    rows: int = 0
    """Rows written of the open table."""
    header_row: bool = False
    """The open row has a ``<th>``."""
    paragraphs: int = 0
    """``<p>`` elements seen in the open cell (a second one makes a layout table)."""
    spans: dict[int, int] = field(default_factory=dict)
    """Columns that cells of earlier rows span into, and for how many more rows."""
    next_spans: dict[int, int] = field(default_factory=dict)
    pad: int = 0
    """Empty cells the open cell's ``colspan`` adds after it."""
    budget: int = SPAN_CELLS
    """Empty cells that spans may still add to this page."""
    layout: list[int] = field(default_factory=list)
    """Depths of the open tables found to be layout tables."""

    def in_layout(self) -> bool:
        """Whether the open table is a layout table."""
        return bool(self.layout) and self.layout[-1] == self.depth

    def to_layout(self) -> None:
        """The open table turns out to be a layout table."""
        if not self.in_layout():
            self.layout.append(self.depth)

    def start_table(self) -> None:
        self.depth += 1
        self.spans.clear()
        self.next_spans.clear()

    def end_table(self) -> None:
        if self.in_layout():
            self.layout.pop()
        self.depth = max(self.depth - 1, 0)
        self.rows = 0

    def start_row(self) -> None:
        self.pad = 0
        self.header_row = False

    def end_row(self, cells: list[list[str]]) -> None:
        """Add the empty cells spans fill at the end of the row to ``cells``, and carry the
        new ``rowspan`` cells to the next rows."""
        self.spanned(cells, end=True)
        self.spans.update(self.next_spans)
        self.next_spans.clear()

    def start_cell(
        self, cells: list[list[str]], tag: str, attributes: dict[str, str | None]
    ) -> None:
        """A new cell in ``cells``, after the empty cells that spans add before it."""
        self.spanned(cells)
        cells.append([])
        self.paragraphs = 0
        self.header_row = self.header_row or tag == "th"

        column = len(cells) - 1
        rows = span(attributes.get("rowspan"), 100)
        self.pad = min(span(attributes.get("colspan"), 50) - 1, max(self.budget, 0))
        self.budget -= self.pad
        if rows > 1:
            for extra in range(self.pad + 1):
                self.next_spans[column + extra] = rows - 1

    def spanned(self, cells: list[list[str]], *, end: bool = False) -> None:
        """Add to ``cells`` the empty cells of the open cell's ``colspan``, then those that
        ``rowspan`` cells of earlier rows fill here (all of them at the row's ``end``)."""
        cells.extend([] for _ in range(self.pad))
        self.pad = 0
        last = max(self.spans) if end and self.spans else -1
        while self.spans and self.budget > 0:
            column = len(cells)
            left = self.spans.get(column)
            if left is None and column >= last:
                return
            cells.append([])
            self.budget -= 1
            if left is not None:
                if left > 1:
                    self.spans[column] = left - 1
                else:
                    del self.spans[column]
        self.spans.clear()
