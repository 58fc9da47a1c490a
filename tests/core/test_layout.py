"""The layout is the architecture: each room imports only from the rooms below it.

The table is the one in docs/design.md ("The layout"). A new import across rooms either fits
it or changes the design, and then the table changes with it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "trio_batch"

# room -> the rooms it may import from. The Store protocol is the engine's interface, so the
# core (and the web fetcher, which caches in the store) may import it and nothing else of stores.
ALLOWED = {
    "core": {"core", "stores._protocol"},
    "stores._protocol": {"core"},
    "stores": {"core", "stores._protocol", "stores"},
    "web": {"core", "stores._protocol", "web"},
    "http": {"core", "stores._protocol", "stores", "web", "http"},
    "_cli": {"core", "stores._protocol", "stores", "web", "http", "_cli"},
}


def room(module: str) -> str:
    parts = module.split(".")
    if parts[1:3] == ["stores", "_protocol"]:
        return "stores._protocol"
    if len(parts) > 1 and parts[1] in ("stores", "web", "http", "_cli"):
        return parts[1]
    return "core"


def module_name(path: Path) -> str:
    parts = ["trio_batch", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[str]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            found.append(".".join([*base, *([node.module] if node.module else [])]))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.split(".")[0] == "trio_batch"]


SOURCES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_each_module_imports_only_from_the_rooms_below(path: Path) -> None:
    """No lower room imports a higher one (the core never imports the CLI, say)."""
    own = room(module_name(path))
    wrong = [name for name in imports(path) if room(name) not in ALLOWED[own]]

    assert [] == wrong


def test_the_rooms_are_all_there() -> None:
    """The walk sees every room, so the test above checks something in each."""
    assert set(ALLOWED) == {room(module_name(p)) for p in SOURCES}


def test_no_source_file_outgrows_one_head() -> None:
    """No module is much over 500 lines: a longer one is split along its concerns."""
    long = {
        str(p.relative_to(SRC)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > 550
    }

    assert {} == long
