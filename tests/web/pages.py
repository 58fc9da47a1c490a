"""Write the fixture pages' expected outputs again (the pages themselves are in ``support.py``):
the main content (the default) in ``NAME.txt`` and ``NAME.md``, the whole page (``main_content:
false``) of each HTML page in ``NAME.whole.txt`` and ``NAME.whole.md``.

Run it after a deliberate change to the extractor, then read the diff
(``git diff tests/web/fixtures``) before committing it::

    python -m tests.web.pages
"""

from __future__ import annotations

from tests.web.support import MODES as MODES, Page as Page, pages as pages

# MODES, Page and pages stay importable from here: test_extract_pages.py and
# bench/extract_cost.py import them from this module.


def main() -> None:
    """Shape every fixture page in every mode (and HTML pages whole too) and write the outputs."""
    for page in pages():
        for mode in MODES:
            for whole in (False, True) if page.name.endswith(".html") else (False,):
                content, _meta = page.shaped(mode, whole=whole)
                path = page.expected_path(mode, whole=whole)
                path.write_text(content, encoding="utf-8")
                print("wrote", path.name)


if __name__ == "__main__":
    main()
