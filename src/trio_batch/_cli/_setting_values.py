"""How each setting's raw value is read: from a flag or a variable (a string) or from the TOML
file (any TOML value), to the setting's type; a ``ValueError`` says what is allowed.

The parsers of :mod:`._settings`' fields (each field names its own in its metadata).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

Parse = Callable[[object], object]
"""A setting's parser: the raw value (a string from a flag or the environment, any TOML value
from the file) to the setting's value; a ``ValueError`` says what is allowed."""


def number(
    kind: type[int] | type[float],
    lo: float,
    hi: float | None = None,
    *,
    above: bool = False,
    wrong: str,
    out_of_range: str | None = None,
) -> Parse:
    """The parser of a number of ``kind`` from ``lo`` (excluded if ``above``) to ``hi``.

    ``wrong`` is the message for anything that is not such a number, ``out_of_range`` (default
    ``wrong``) for one outside the range. A float is finite; a bool is not a number here,
    although Python counts it as one.
    """
    types = (int,) if kind is int else (int, float)

    def parse(raw: object) -> object:
        if isinstance(raw, bool):
            raise ValueError(wrong)
        if isinstance(raw, str):
            try:
                raw = kind(raw.strip())
            except ValueError:
                raise ValueError(wrong) from None
        if not isinstance(raw, types):
            raise ValueError(wrong)

        low_ok = raw > lo if above else raw >= lo
        high_ok = hi is None or raw <= hi
        if not (low_ok and high_ok and math.isfinite(raw)):
            raise ValueError(out_of_range or wrong)
        return kind(raw)

    return parse


def whole(lo: int, hi: int | None = None) -> Parse:
    return number(
        int,
        lo,
        hi,
        wrong="must be a whole number",
        out_of_range=f"must be between {lo} and {hi}" if hi else f"must be >= {lo}",
    )


POSITIVE = number(float, 0, above=True, wrong="must be a number > 0")
SECONDS_OR_ZERO = number(float, 0, wrong="must be a number of seconds >= 0")

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")  # what PostgresStore.open(schema=) accepts


def schema(raw: object) -> object:
    if not isinstance(raw, str) or not _SCHEMA.match(raw.strip()):
        raise ValueError(
            "must be a lower-case SQL identifier (letters, digits, underscores; at most 63)"
        )
    return raw.strip()


def text(raw: object) -> object:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("must be a non-empty string")
    return raw.strip()


def boolean(raw: object) -> object:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
    raise ValueError("must be true or false")


def level(raw: object) -> object:
    if not isinstance(raw, str) or raw.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError("must be one of debug, info, warning, error")
    return raw.lower()
