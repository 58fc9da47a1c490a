"""Sphinx roles in docstrings become cross-references on the Python API page, and none survive.

The docstrings use reST roles (``:class:`BatchEngine```, ``:meth:`aclose```), the house style
of Trio and the conventions (Napoleon Google style). mkdocstrings reads Google style but leaves
the roles as raw text. Two parts fix that:

* :class:`SphinxRoles`, a Griffe extension (``extensions:`` in mkdocs.yml), rewrites each role
  once the package is loaded: the target is looked up from the docstring's own scope outwards
  (members, the class, the module, then the public ``trio_batch`` names), and becomes an
  *optional* autorefs link (a link when the object is on the site, plain code otherwise, never
  a warning). Targets outside the package (``trio.Cancelled``) become code.
* :func:`on_post_page`, a MkDocs hook, fails the strict build when a raw role reaches a page.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|exc|mod|data|obj|const):`(~?)([^`]+)`")
RAW_ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj|const):(?:<code>|`)")
_PACKAGE = "trio_batch"
_log = logging.getLogger("mkdocs.hooks.sphinx_roles")


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, griffe.Object):
            yield from _walk(member)


def _follow(obj: griffe.Object | griffe.Alias) -> griffe.Object | None:
    if isinstance(obj, griffe.Alias):
        try:
            target = obj.final_target
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
        return target if isinstance(target, griffe.Object) else None
    return obj


def _lookup(base: griffe.Object, parts: list[str]) -> griffe.Object | None:
    current: griffe.Object | None = base
    for part in parts:
        if current is None or part not in current.members:
            return None
        current = _follow(current.members[part])
    return current


class SphinxRoles(griffe.Extension):
    """Rewrite reST roles in the package's docstrings into optional autorefs links."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != _PACKAGE:
            return
        public = self._public_paths(pkg)
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(
                    lambda m, scope=obj: self._link(m, scope, pkg, public), obj.docstring.value
                )

    @staticmethod
    def _public_paths(pkg: griffe.Module) -> dict[str, str]:
        """Canonical path -> the public path the API page documents it under."""
        public: dict[str, str] = {}
        modules = [pkg] + [
            m for m in pkg.members.values() if not m.is_alias and isinstance(m, griffe.Module)
        ]
        for module in modules:
            for name, member in module.members.items():
                if isinstance(member, griffe.Alias) and not name.startswith("_"):
                    public.setdefault(member.target_path, f"{module.path}.{name}")
        return public

    def _link(
        self, match: re.Match[str], scope: griffe.Object, pkg: griffe.Module, public: dict[str, str]
    ) -> str:
        _, tilde, target = match.groups()
        target = target.strip().lstrip("!").removesuffix("()")
        display = target.rsplit(".", 1)[-1] if tilde else target
        code = f"<code>{display}</code>"
        found = self._resolve(target, scope, pkg)
        if found is None:
            return code
        path = found.path
        for canonical in sorted(public, key=len, reverse=True):
            if path == canonical or path.startswith(canonical + "."):
                path = public[canonical] + path[len(canonical) :]
                break
        return f'<autoref identifier="{path}" optional>{code}</autoref>'

    @staticmethod
    def _resolve(target: str, scope: griffe.Object, pkg: griffe.Module) -> griffe.Object | None:
        parts = target.split(".")
        if parts[0] == _PACKAGE:
            return _lookup(pkg, parts[1:])
        bases: list[griffe.Object] = []
        current: griffe.Object | None = scope
        while current is not None:
            bases.append(current)
            current = current.parent
        bases += [
            m for m in pkg.members.values() if not m.is_alias and isinstance(m, griffe.Module)
        ]
        for base in bases:
            found = _lookup(base, parts)
            if found is not None and found.path.startswith(_PACKAGE):
                return found
        return None


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Warn (an error under ``--strict``) when a raw reST role reached the page."""
    for match in RAW_ROLE.finditer(output):
        context = re.sub(r"<[^>]+>", "", output[match.start() : match.end() + 60])
        _log.warning("%s: a raw reST role reached the page: %s", page.file.src_uri, context)
    return output
