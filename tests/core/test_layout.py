"""The layout is the architecture: rooms by concept, each importing only from the rooms below.

The table is the one in docs/design.md ("The layout"). A new import across rooms either fits
it or changes the design, and then the table changes with it. A room shows other rooms its
face (its package's ``__init__``) and keeps its modules to itself; the ground and the ``Store``
protocol are everybody's.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "trio_batch"
TESTS = ROOT / "tests"

# room -> the rooms it may import from. "ground" is the data, errors, settings and helpers every
# room stands on (and the public leaves client, metrics, testing); "face" is trio_batch itself.
ALLOWED = {
    "ground": {"ground"},
    "stores._protocol": {"ground"},
    "engine": {"ground", "stores._protocol", "engine"},
    "face": {"ground", "engine"},
    "stores": {"ground", "stores._protocol", "stores"},
    "web": {"ground", "stores._protocol", "web"},
    "http": {"ground", "stores._protocol", "engine", "stores", "web", "http"},
    "_mcp": {"ground", "stores._protocol", "engine", "stores", "web", "http", "_mcp"},
    "_cli": {"ground", "stores._protocol", "engine", "stores", "web", "http", "_mcp", "_cli"},
}

# The modules one room may import of another: its face, and what is everybody's.
EVERYBODYS = {"ground", "stores._protocol"}

# Files allowed past MAX_CODE_LINES, each with the reason it is still one concept. Code lines
# are counted without docstrings, comments and blank lines: documentation never competes with
# the cap (a squeeze to a count once cut facts from public docstrings).
MAX_CODE_LINES = 600
LONG_FILES: dict[str, str] = {}


def code_lines(text: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring (or of any
    string that stands alone as a statement, as attribute docstrings do)."""
    prose: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            prose.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in skip and token.type != tokenize.ENDMARKER:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - prose)


def room(module: str) -> str:
    parts = module.split(".")
    if parts == ["trio_batch"]:
        return "face"
    if parts[1:3] == ["stores", "_protocol"]:
        return "stores._protocol"
    if parts[1] == "_engine":
        return "engine"
    if parts[1] in ("stores", "web", "http", "_mcp", "_cli"):
        return parts[1]
    return "ground"


def is_face(module: str) -> bool:
    """Whether ``module`` is what its room shows the others: the room's package itself."""
    parts = module.split(".")
    return len(parts) <= 2


def module_name(path: Path) -> str:
    parts = ["trio_batch", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: str, top: str) -> list[str]:
    """The modules of ``top`` that the file at ``path`` imports (relative ones resolved)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            found.append(".".join([*base, *([node.module] if node.module else [])]))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.split(".")[0] == top]


def source_imports(path: Path) -> list[str]:
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    return imports(path, package, "trio_batch")


SOURCES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_each_module_imports_only_from_the_rooms_below(path: Path) -> None:
    """No lower room imports a higher one (the engine never imports the CLI, say)."""
    own = room(module_name(path))
    wrong = [name for name in source_imports(path) if room(name) not in ALLOWED[own]]

    assert [] == wrong


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_a_room_reaches_another_only_through_its_face(path: Path) -> None:
    """A room imports another room's package, never a private module behind it.

    So ``_cli`` imports ``trio_batch.http``, not ``trio_batch.http._keys``: what a room keeps to
    itself may change without the other rooms noticing. The ground and the ``Store`` protocol
    are every room's.
    """
    own = room(module_name(path))
    wrong = [
        name
        for name in source_imports(path)
        if room(name) != own and room(name) not in EVERYBODYS and not is_face(name)
    ]

    assert [] == wrong


# web's own rooms, floor by floor: each imports only the floors below it and itself. The
# extraction is pure code run in worker processes on untrusted bytes: it imports neither the
# fetching nor the browser, so what a worker loads and what it may reach stays small.
WEB_ALLOWED = {
    "_guard": {"_guard"},
    "_extract": {"_guard", "_extract"},
    "_render": {"_guard", "_extract", "_render"},
    "_fetch": {"_guard", "_extract", "_render", "_fetch"},
}


def web_room(module: str) -> str | None:
    """The room of ``trio_batch.web`` that ``module`` is in (None: the face, or not web)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["trio_batch", "web"] and len(parts) > 2 else None


WEB_SOURCES = [p for p in SOURCES if web_room(module_name(p)) is not None]


@pytest.mark.parametrize("path", WEB_SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_web_rooms_import_only_the_floors_below(path: Path) -> None:
    """Inside ``web/``, the guard is the floor, then extraction, the browser and fetching.

    So extraction never imports fetching or the browser, and no import runs back up.
    """
    own = web_room(module_name(path))
    assert own is not None
    wrong = [
        name
        for name in source_imports(path)
        if (other := web_room(name)) is not None and other not in WEB_ALLOWED[own]
    ]

    assert [] == wrong


def test_web_rooms_are_all_there() -> None:
    """Every module of ``web/`` but its face lives in one of the four rooms."""
    web = SRC / "web"
    loose = sorted(p.name for p in web.glob("*.py") if p.name != "__init__.py")

    assert [] == loose
    assert set(WEB_ALLOWED) == {web_room(module_name(p)) for p in WEB_SOURCES}


MODULES = {module_name(p): p for p in SOURCES}


def imported_modules(path: Path) -> set[str]:
    """The project's modules that the file at ``path`` imports, each resolved to a module.

    ``from . import _answers`` names the module ``_answers``, not the package; a name that is
    an object of a module resolves to that module. Imports under ``TYPE_CHECKING`` and inside
    functions count: a circle of types is still a circle a reader has to hold.
    """
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            named.update(
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            )
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    found: set[str] = set()
    for name in named:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def test_no_circle_of_imports() -> None:
    """No module imports, through others, a module that imports it: not even for types.

    Found as the strongly connected components of the import graph (Tarjan's algorithm).
    """
    graph = {name: imported_modules(path) for name, path in MODULES.items()}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:
        order[name] = low[name] = len(order)
        stack.append(name)
        for other in graph[name]:
            if other not in order:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], order[other])
        if low[name] == order[name]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == name:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in graph:
        if name not in order:
            visit(name)

    assert [] == circles


def test_the_rooms_are_all_there() -> None:
    """The walk sees every room, so the tests above check something in each."""
    assert set(ALLOWED) == {room(module_name(p)) for p in SOURCES}


def test_a_file_is_one_concept_of_readable_length() -> None:
    """No module has over 600 lines of code unless LONG_FILES says why it is still one concept.

    Functions are what must stay small (ruff's C901 and PLR0915 hold them); a file is a room
    of one concept, so a long one is split only where the concept splits. Docstrings and
    comments do not count: a file never has to lose documentation to stay under the cap.
    """
    long = {
        str(p.relative_to(SRC)): n
        for p in SOURCES
        if (n := code_lines(p.read_text())) > MAX_CODE_LINES
    }

    assert set(LONG_FILES) == set(long)


def test_code_lines_leave_out_docstrings_and_comments() -> None:
    """The count the cap reads is of code alone."""
    source = '''
    """Module docstring,
    on two lines."""

    # a comment
    X = 1
    """X's docstring."""


    def f(a: int) -> str:
        """f's docstring."""
        return (
            "a string in code counts"
        )
    '''

    assert 5 == code_lines(textwrap.dedent(source))


TEST_MODULES = sorted(TESTS.rglob("test_*.py"))


@pytest.mark.parametrize("path", TEST_MODULES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path) -> None:
    """Shared builders and fixtures live in a ``support.py`` or ``conftest.py``, not in a test.

    A test module that imports another runs the other's module code and ties the two together
    by accident; a room's ``support.py`` says what is shared on purpose.
    """
    package = ".".join(["tests", *path.relative_to(TESTS).parent.parts])
    wrong = [
        name
        for name in imports(path, package, "tests")
        if name.rsplit(".", 1)[-1].startswith("test_")
    ]

    assert [] == wrong


def test_the_engine_never_asks_which_store_it_has() -> None:
    """``BatchEngine`` runs the same code over a fleet and a single store: the one decision
    (its own rotation or a fleet's claims) is made in ``open_engine``, never in the class.

    Read from the class's code: no name in it asks for a fleet, a shared store or a cast.
    """
    source = (SRC / "_engine" / "_batch_engine.py").read_text()
    engine = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "BatchEngine"
    )
    asked = sorted(
        {
            name
            for node in ast.walk(engine)
            for name in (
                [node.id]
                if isinstance(node, ast.Name)
                else [node.attr]
                if isinstance(node, ast.Attribute)
                else []
            )
            if name in {"is_fleet", "is_shared", "cast", "FleetStore", "FleetTurns", "LocalTurns"}
            or "fleet" in name.lower()
        }
    )

    assert [] == asked


def test_every_test_says_what_it_holds() -> None:
    """Every test function has a docstring: one sentence of the behaviour a user relies on.

    A test's name is a sentence too, but the docstring is where it says why the behaviour
    matters and what the numbers mean (CONVENTIONS §11).
    """
    missing = [
        f"{path.relative_to(TESTS)}::{node.name}"
        for path in TEST_MODULES
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
        and ast.get_docstring(node) is None
    ]

    assert [] == missing
