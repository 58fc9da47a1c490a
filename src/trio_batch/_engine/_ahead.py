"""How many turns a fleet instance claims ahead of its workers (``ClaimAhead``)."""

from __future__ import annotations

import math
from typing import final

# Weight of the newest sample in the running means.
_WEIGHT = 0.1
# Turns claimed ahead at most: the fairness slack this adds stays bounded. With instant fetches
# a claim statement costs about the same for 2 turns as for 30 (PostgreSQL: ~0.9 ms of execution
# and a round trip), so an instance's throughput is the turns a claim carries over its round
# trip: W1 on one PostgreSQL instance ran 2,100-2,300 targets/s at 16, 3,100 at 32, 3,800 at 64.
MAX_AHEAD = 64


@final
class ClaimAhead:
    """Claims ahead just enough to hide a claim's round trip from the workers.

    A fleet worker that ends a fetch takes its next turn from the turns its instance claimed
    meanwhile; without such a turn it waits a whole claim (a statement on PostgreSQL). Workers
    that finish a fetch every ``f`` seconds use ``workers * c / f`` turns while one claim of ``c``
    seconds is out. The claimer tops its turns up only once half of them are used
    (:meth:`~trio_batch._engine._fleet_turns.FleetTurns._claims_now`), so that a claim carries
    many turns, not the one or two used since the last; the other half must then last through
    the claim's round trip, so twice that many are claimed ahead (at least one, at most
    ``MAX_AHEAD``). With slow fetches that is one turn per instance, which is all the fairness
    slack it adds; with instant fetches it is ``MAX_AHEAD``, and each claim statement carries
    many turns. Until a fetch has ended the fetches' speed is unknown, and one turn is claimed
    ahead.
    """

    __slots__ = ("_claim", "_fetch")

    def __init__(self) -> None:
        self._claim = 0.0  # running mean seconds of a claim statement
        self._fetch: float | None = None  # running mean seconds of a fetch

    def claimed(self, seconds: float) -> None:
        """Note how long a claim statement took."""
        self._claim += _WEIGHT * (seconds - self._claim)

    def fetched(self, seconds: float) -> None:
        """Note how long a fetch took."""
        if self._fetch is None:
            self._fetch = seconds
        else:
            self._fetch += _WEIGHT * (seconds - self._fetch)

    @property
    def fetch_seconds(self) -> float | None:
        """The running mean of a fetch's seconds (None until one has ended)."""
        return self._fetch

    def turns(self, workers: int) -> int:
        """Turns to hold claimed beyond the idle workers of an instance of ``workers``."""
        if self._fetch is None or self._claim <= 0.0:
            return 1
        used = 2 * workers * self._claim  # two round trips' worth: see the class's docstring
        if used >= MAX_AHEAD * self._fetch:  # instant fetches too: no division by zero
            return MAX_AHEAD
        return max(1, math.ceil(used / self._fetch))
