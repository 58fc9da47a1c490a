"""The input of ``trio-batch run``: URLs one a line, or JSON objects one a line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable

from .._model import Options, Target
from ._output import UsageError


def parse_targets(lines: Iterable[str], source: str) -> list[Target]:
    """The targets of an input file: URLs one a line, or JSON objects one a line.

    Raises:
        UsageError: a line is neither; the message names the line and how to fix it.
    """
    targets: list[Target] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}, line {lineno}"
        if line.startswith("{"):
            targets.append(_json_target(line, where))
        elif any(c.isspace() for c in line):
            raise UsageError(
                f"{where}: a URL cannot contain spaces; write one URL a line "
                '(or one JSON object {"url": ..., "options": {...}} a line)'
            )
        else:
            targets.append(Target(line))
    return targets


def _json_target(line: str, where: str) -> Target:
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
        return Target(url, Options.from_json(options))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def read_input(path: str) -> list[Target]:
    """Read and parse ``path`` (``-`` is stdin)."""
    if path == "-":
        return parse_targets(sys.stdin, "stdin")
    try:
        with open(path, encoding="utf-8") as f:
            return parse_targets(f, path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; write one URL a line") from None
