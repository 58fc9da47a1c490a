"""The fixture pages of ``tests/web/fixtures/pages`` and their expected outputs: the main
content (the default) in ``NAME.txt`` and ``NAME.md``, the whole page (``main_content:
false``) of each HTML page in ``NAME.whole.txt`` and ``NAME.whole.md``.

Regenerate the expected outputs after a deliberate change to the extractor, then read the diff
(``git diff tests/web/fixtures``) before committing it::

    python -m tests.web.pages
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trio_batch import Options
from trio_batch.web import shape

FOLDER = Path(__file__).parent / "fixtures" / "pages"
MODES = ("text", "markdown")


@dataclass(frozen=True)
class Page:
    name: str
    url: str
    content_type: str

    @property
    def body(self) -> bytes:
        return (FOLDER / self.name).read_bytes()

    def expected_path(self, mode: str, *, whole: bool = False) -> Path:
        kind = ".whole" if whole else ""
        return FOLDER / f"{self.name}{kind}.{'md' if mode == 'markdown' else 'txt'}"

    def shaped(self, mode: str, *, whole: bool = False) -> tuple[str, dict[str, object]]:
        options = Options(mode=mode, main_content=not whole)
        result = shape(self.body, url=self.url, content_type=self.content_type, options=options)
        return result.content, result.meta


def pages() -> list[Page]:
    manifest = json.loads((FOLDER / "pages.json").read_text(encoding="utf-8"))
    return [Page(name, **entry) for name, entry in manifest.items()]


def main() -> None:
    for page in pages():
        for mode in MODES:
            for whole in (False, True) if page.name.endswith(".html") else (False,):
                content, _meta = page.shaped(mode, whole=whole)
                path = page.expected_path(mode, whole=whole)
                path.write_text(content, encoding="utf-8")
                print("wrote", path.name)


if __name__ == "__main__":
    main()
