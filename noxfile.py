"""Every check of the project, one session each: ``nox -l`` lists them."""

from __future__ import annotations

import os

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_venv = "yes"

PYPROJECT = nox.project.load_toml("pyproject.toml")
EXTRAS = "all"


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite against the package with every extra (``-- -k name`` to filter)."""
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "test"))
    session.run("pytest", *session.posargs, env={"HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "default")})


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff: the lint rules (ASYNC included) and the formatting."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src and tests."""
    session.install("-e", f".[{EXTRAS}]", *nox.project.dependency_groups(PYPROJECT, "typecheck"))
    session.run("mypy", *session.posargs)
