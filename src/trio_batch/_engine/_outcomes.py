"""What a target that did not fetch becomes: its failed outcome, with the hint an agent reads.

SPEC §3.3: a ``TargetError`` is stored with its message and hint; any other exception as
``internal error`` (never its text, which may hold a URL); a target that stayed busy past
``Config.retry_for``, or whose host stayed pushed back past its block limit, fails unfetched
with a hint that says what to do. Pure functions of the failure; the engine logs and stores.
"""

from __future__ import annotations

from .._budget import Waiting
from .._errors import RetryLater, TargetError
from .._model import TargetState
from ..stores._protocol import Outcome


def failed(kind: TargetError | RetryLater | None, claim: str) -> Outcome:
    """A fetch that raised: a ``TargetError`` as itself, anything else as an internal error."""
    if isinstance(kind, TargetError):  # hooks read its status, also when it came in a group
        return Outcome(TargetState.FAILED, error=kind.msg, hint=kind.hint, claim=claim)
    return Outcome(TargetState.FAILED, error="internal error", claim=claim)


def busy_too_long(kind: RetryLater, busy_for: float, claim: str) -> Outcome:
    """A target that kept coming back busy for longer than ``Config.retry_for``."""
    hint = f"the target stayed busy for {busy_for:.0f} s; try it again later"
    return Outcome(TargetState.FAILED, error=str(kind) or "busy", hint=hint, claim=claim)


def blocked(waiting: Waiting, busy_for: float, claim: str) -> Outcome:
    """A target whose host stayed pushed back past the block limit fails, unfetched; so does a
    busy one whose host would hold it back past ``Config.retry_for``."""
    if not waiting.blocked:
        return Outcome(
            TargetState.FAILED,
            error="busy",
            hint=f"the target stayed busy for {busy_for:.0f} s and its site asked for a "
            "longer wait; try it again later",
            claim=claim,
        )
    return Outcome(
        TargetState.FAILED,
        error=f"the host kept answering 429/503 for {waiting.blocked_for:.0f} s (host_block_limit)",
        hint="the site asked us to slow down; retry the job's failed targets later",
        claim=claim,
    )
