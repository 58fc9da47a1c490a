"""The fixture pages of ``tests/web/fixtures/pages`` and their expected outputs.

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

    def expected_path(self, mode: str) -> Path:
        return FOLDER / f"{self.name}.{'md' if mode == 'markdown' else 'txt'}"

    def shaped(self, mode: str) -> tuple[str, dict[str, object]]:
        result = shape(
            self.body, url=self.url, content_type=self.content_type, options=Options(mode=mode)
        )
        return result.content, result.meta


def pages() -> list[Page]:
    manifest = json.loads((FOLDER / "pages.json").read_text(encoding="utf-8"))
    return [Page(name, **entry) for name, entry in manifest.items()]


def main() -> None:
    for page in pages():
        for mode in MODES:
            content, _meta = page.shaped(mode)
            page.expected_path(mode).write_text(content, encoding="utf-8")
            print("wrote", page.expected_path(mode).name)


if __name__ == "__main__":
    main()
