"""The public surface: exactly the SPEC's names, from the package itself, final classes."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

import trio_batch
import trio_batch.stores

from ..support import fresh_python

SPEC_NAMES = {
    "open_engine", "BatchEngine", "Config", "Hooks",
    "Caller", "Options", "Target", "Result", "TargetError", "RetryLater",
    "Job", "TargetStatus", "JobStatus", "TargetState", "Submitted", "Snapshot",
    "SubmitError", "NoTargets", "TooManyTargets", "CallerBusy", "Busy",
}  # fmt: skip
EXTRA_NAMES = {
    "EngineStatistics", "Error", "FetchFunc", "JobWatch", "NotRetryable", "StoreError", "Webhook",
    "HostBudget", "HostSlot", "HostBlocked", "Waiting", "WaitingTarget",
    "CrawlSpec", "CrawlInfo", "SiteGuide",
}  # fmt: skip


def test_all_is_the_spec_names_plus_documented_extras() -> None:
    """__all__ lists the SPEC §2 names and the documented extras, sorted."""
    assert SPEC_NAMES | EXTRA_NAMES == set(trio_batch.__all__)
    assert sorted(trio_batch.__all__) == trio_batch.__all__


def test_spec_import_block_matches() -> None:
    """The import block of the SPEC copy in docs names exactly SPEC_NAMES."""
    spec = (Path(__file__).parents[2] / "docs" / "spec.md").read_text()
    block = re.search(r"from trio_batch import \((.*?)\)", spec, re.S)
    assert block is not None
    assert SPEC_NAMES == {n.strip() for n in block.group(1).split(",") if n.strip()}


def test_stores_export() -> None:
    """MemoryStore and SQLiteStore import from trio_batch.stores and say they live there."""
    from trio_batch.stores import MemoryStore, SQLiteStore

    assert "trio_batch.stores" == MemoryStore.__module__
    assert "trio_batch.stores" == SQLiteStore.__module__


def loaded_modules(statement: str) -> set[str]:
    """The names in ``sys.modules`` after ``statement`` runs in a fresh interpreter."""
    return set(fresh_python(f"{statement}\nimport sys\nprint('\\n'.join(sys.modules))").split())


def test_import_loads_no_driver_or_extra() -> None:
    """``import trio_batch`` loads no driver, POSIX-only or optional module that trio does not."""
    optional = {
        "sqlite3", "_sqlite3", "fcntl", "psycopg", "psycopg_pool", "httpx", "starlette",
        "hypercorn", "prometheus_client", "rich", "jq", "regex",
    }  # fmt: skip
    baseline = loaded_modules("import trio")
    loaded = loaded_modules("import trio_batch")
    added = {name for name in loaded - baseline if name.partition(".")[0] in optional}

    assert set() == added
    assert "trio_batch.stores._sqlite" not in loaded
    assert "trio_batch.stores._postgres" not in loaded
    assert "trio_batch.client" not in loaded


@pytest.mark.parametrize("name", sorted(SPEC_NAMES | EXTRA_NAMES))
def test_public_names_report_the_package(name: str) -> None:
    """Every public class says it lives in trio_batch, not a private module."""
    obj = getattr(trio_batch, name)
    if inspect.isclass(obj):
        assert "trio_batch" == obj.__module__


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in SPEC_NAMES | EXTRA_NAMES
        if inspect.isclass(getattr(trio_batch, n))
        and n not in {"Error", "SubmitError", "Submitted", "Snapshot", "JobStatus", "TargetState"}
        and n != "SiteGuide"  # a Protocol: implemented, never subclassed
    ),
)
def test_public_classes_are_final(name: str) -> None:
    """Concrete public classes cannot be subclassed by accident (typing.final)."""
    assert getattr(getattr(trio_batch, name), "__final__", False)


PUBLIC_MODULES = [
    "trio_batch",
    "trio_batch.stores",
    "trio_batch.web",
    "trio_batch.http",
    "trio_batch.client",
    "trio_batch.metrics",
    "trio_batch.testing",
]


def documented_names() -> set[str]:
    """The objects docs/api.md renders (its ``::: dotted.name`` lines)."""
    api = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    return set(re.findall(r"^::: ([\w.]+)$", api, re.M))


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_is_in_the_api_reference(module: str) -> None:
    """A name in a public module's ``__all__`` has an entry in docs/api.md, so a user finds it."""
    names = importlib.import_module(module).__all__
    missing = [f"{module}.{name}" for name in names]

    assert [] == [name for name in missing if name not in documented_names()]


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_exception_is_under_the_one_root(module: str) -> None:
    """Each exception a public module exports subclasses ``trio_batch.Error``, so one
    ``except trio_batch.Error`` catches anything trio-batch raises on purpose."""
    public = importlib.import_module(module)
    exceptions = [
        f"{module}.{name}"
        for name in public.__all__
        if inspect.isclass(obj := getattr(public, name)) and issubclass(obj, BaseException)
    ]
    outside = [
        name
        for name in exceptions
        if not issubclass(getattr(public, name.rsplit(".", 1)[1]), trio_batch.Error)
    ]

    assert [] == outside
