"""Small helpers shared by the public classes."""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


class NoPublicConstructor(type):
    """A metaclass whose classes can only be built through their ``_create`` classmethod.

    The error names the public factory: a class sets ``_factory`` to its spelling (for example
    ``"SQLiteStore.open()"``); the default is ``open_engine()``.
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        factory = getattr(cls, "_factory", "open_engine()")
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; use {factory}"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]


def fixup_module_metadata(module_name: str, namespace: dict[str, object]) -> None:
    """Make the public names report ``module_name`` as their module, as Trio does."""
    seen: set[int] = set()

    def fix_one(qualname: str, name: str, obj: object) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        mod = getattr(obj, "__module__", None)
        if mod is not None and mod.startswith("trio_batch."):
            try:
                obj.__module__ = module_name
                if isinstance(obj, type):
                    obj.__name__ = name
                    obj.__qualname__ = qualname
                    for attr_name, attr_value in obj.__dict__.items():
                        fix_one(f"{qualname}.{attr_name}", attr_name, attr_value)
            except (AttributeError, TypeError):
                pass

    for name in namespace.get("__all__", ()):  # type: ignore[attr-defined]
        obj = namespace[name]
        if not name.startswith("_"):
            fix_one(name, name, obj)


def import_public(
    package: str, namespace: dict[str, object], where: Mapping[str, str], names: Iterable[str]
) -> None:
    """Import ``names`` into a public package's ``namespace`` from their private modules
    (``where``, relative to ``package``), each reporting ``package`` as its module: what a
    package's ``__getattr__`` does on first use of a name (PEP 562)."""
    found = {name: getattr(importlib.import_module(where[name], package), name) for name in names}
    namespace.update(found)
    fixup_module_metadata(package, {**found, "__all__": list(found)})


def raise_single_exception_from_group(group: BaseExceptionGroup[BaseException]) -> None:
    """Raise the one error inside ``group`` as itself, keeping its cause and context.

    A nursery wraps even a single error in a group; an ``async with`` that owns a nursery uses
    this so its caller can write ``except CallerBusy`` (Trio's own helper of the same name is
    the model). :class:`trio.Cancelled` siblings are dropped; a group of only ``Cancelled``
    raises the first. Returns without raising when the group holds several real errors: the
    caller then re-raises the group, since hiding one of them would be worse.
    """
    import trio  # (here: the model's modules import this one in shaping workers, without Trio)

    errors = [e for e in group.exceptions if not isinstance(e, trio.Cancelled)]
    if len(errors) > 1:
        return
    raise_saving_context(errors[0] if errors else group.exceptions[0])


def raise_saving_context(exc: BaseException) -> NoReturn:
    """Raise ``exc`` again without Python setting its ``__context__`` to the current error."""
    __tracebackhide__ = True
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context
        del exc, context


def plural(count: int) -> str:
    """The ending for ``count`` things: ``f"{n} target{plural(n)}"`` is "1 target", "2 targets"."""
    return "" if count == 1 else "s"


def backoff(attempt: int, first: float, longest: float, *, jitter: float = 0.0) -> float:
    """Seconds to wait before try ``attempt + 1``, after ``attempt`` (1, 2, ...) failed tries.

    ``first`` doubled at each failure, up to ``longest``. With ``jitter`` (0 to 1) the wait is
    shortened by up to that share of itself, at random: clients that failed together (a
    receiver restarting, a database failing over) then come back spread out instead of all at
    once. The one backoff of the house: the engine's store retries, the PostgreSQL writer's
    reconnects, webhook deliveries and the client's stream resumption all wait through it.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1 (got {attempt})")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be from 0 to 1 (got {jitter})")
    wait = min(first * 2.0 ** min(attempt - 1, 64), longest)
    return wait * (1.0 - jitter * random.random()) if jitter else wait
