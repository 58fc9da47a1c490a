"""The input of ``trio-batch run``: URLs one a line, or JSON objects one a line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping

from .._model import JSONValue, Options, Target
from ._option_flags import with_defaults
from ._output import UsageError


def parse_targets(
    lines: Iterable[str], source: str, defaults: Mapping[str, JSONValue] | None = None
) -> list[Target]:
    """The targets of an input file: URLs one a line, or JSON objects one a line.

    ``defaults`` (the option flags', :func:`~._option_flags.option_defaults`) are the options
    of a URL line, and of a JSON line where it names none of its own.

    Raises:
        UsageError: a line is neither; the message names the line and how to fix it.
    """
    defaults = defaults or {}
    plain = Options.from_json(dict(defaults))
    targets: list[Target] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}, line {lineno}"
        if line.startswith("{"):
            targets.append(_json_target(line, where, defaults))
        elif any(c.isspace() for c in line):
            raise UsageError(
                f"{where}: a URL cannot contain spaces; write one URL a line "
                '(or one JSON object {"url": ..., "options": {...}} a line)'
            )
        else:
            targets.append(Target(line, plain))
    return targets


def _json_target(line: str, where: str, defaults: Mapping[str, JSONValue]) -> Target:
    try:
        data: object = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'{where}: not valid JSON ({exc.msg}); write {{"url": "https://...", "options": '
            "{...}} on one line"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f'{where}: expected a JSON object {{"url": ..., "options": ...}}')
    unknown = sorted(set(data) - {"url", "options"})
    if unknown:
        raise UsageError(f"{where}: unknown field {unknown[0]!r}; the fields are url and options")
    url = data.get("url")
    if not isinstance(url, str) or not url:
        raise UsageError(f'{where}: "url" must be a non-empty string')
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f'{where}: "options" must be a JSON object')
    try:
        return Target(url, Options.from_json(with_defaults(options, defaults)))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def read_input(path: str, defaults: Mapping[str, JSONValue] | None = None) -> list[Target]:
    """Read and parse ``path`` (``-`` is stdin), with the option flags' ``defaults``."""
    if path == "-":
        return parse_targets(sys.stdin, "stdin", defaults)
    try:
        with open(path, encoding="utf-8") as f:
            return parse_targets(f, path, defaults)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; write one URL a line") from None
