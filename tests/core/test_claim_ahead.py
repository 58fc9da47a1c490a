"""How many turns a fleet instance claims beyond its idle workers (``ClaimAhead``).

The promise: a worker rarely waits a claim's round trip, and the fairness slack this costs
stays one turn per instance while fetches are slow next to a claim.
"""

from __future__ import annotations

from hypothesis import given, strategies as st

from trio_batch._engine._ahead import MAX_AHEAD, ClaimAhead


def settled(claim: float, fetch: float) -> ClaimAhead:
    """A ClaimAhead that has seen many claims and fetches of these lengths."""
    ahead = ClaimAhead()
    for _ in range(200):
        ahead.claimed(claim)
        ahead.fetched(fetch)
    return ahead


def test_one_turn_ahead_before_any_fetch_has_ended() -> None:
    """At start the fetches' speed is unknown: one turn, not a burst of claims."""
    ahead = ClaimAhead()
    ahead.claimed(0.002)
    assert 1 == ahead.turns(8)


def test_slow_fetches_hold_one_turn_ahead() -> None:
    """A 100 ms page and a 2 ms claim: eight workers need one turn ahead, no more."""
    assert 1 == settled(0.002, 0.100).turns(8)


def test_quick_fetches_hold_enough_turns_to_cover_a_claim() -> None:
    """Fetches of 1 ms and claims of 4 ms: two workers use eight turns per claim, and the
    claimer tops up once half its turns are used, so it holds twice that."""
    assert 16 == settled(0.004, 0.001).turns(2)


def test_instant_fetches_hold_the_most() -> None:
    """Fetches far quicker than a claim: the instance holds ``MAX_AHEAD`` turns, never more."""
    assert MAX_AHEAD == settled(0.002, 0.0).turns(2)


@given(
    claim=st.floats(0.0, 10.0),
    fetch=st.floats(0.0, 600.0),
    workers=st.integers(1, 1024),
)
def test_always_between_one_and_the_most(claim: float, fetch: float, workers: int) -> None:
    """Whatever the claims' and fetches' lengths, between one and ``MAX_AHEAD`` turns ahead."""
    assert 1 <= settled(claim, fetch).turns(workers) <= MAX_AHEAD
