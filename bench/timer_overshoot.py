"""How late ``trio.sleep(0.02)`` wakes, alone and beside other wake-ups of the event loop.

W2's loss is in the sleeps' overshoot (docs/benchmarks.md, "W2"). CPython's epoll rounds its
timeout up to the next millisecond, so each time the loop wakes for something else (another
task's timer, a thread handing back a result) and sleeps again, the next timer fires up to 1 ms
late. This measures that with nothing of trio-batch in the way::

    python -m bench.timer_overshoot

``alone``: one task sleeping 20 ms, 300 times. ``ticker``: the same beside a task that sleeps
3 ms in a loop (no threads). ``thread hops``: beside a task that makes a no-op
``trio.to_thread.run_sync`` every 3 ms (what a store's commits look like to the loop).
"""

from __future__ import annotations

import statistics

import trio

SLEEP = 0.02
PERIOD = 0.003
COUNT = 300


async def overshoots(mode: str) -> list[float]:
    """Milliseconds by which each of ``COUNT`` sleeps of ``SLEEP`` overshoots, beside ``mode``."""
    late: list[float] = []
    stop = trio.Event()

    async def ticker() -> None:
        while not stop.is_set():  # noqa: ASYNC110 - the periodic wake-up is the point
            await trio.sleep(PERIOD)

    async def hopper() -> None:
        while not stop.is_set():
            await trio.to_thread.run_sync(lambda: None)
            await trio.sleep(PERIOD)

    async with trio.open_nursery() as nursery:
        if mode == "ticker":
            nursery.start_soon(ticker)
        elif mode == "thread hops":
            nursery.start_soon(hopper)
        for _ in range(COUNT):
            t0 = trio.current_time()
            await trio.sleep(SLEEP)
            late.append((trio.current_time() - t0 - SLEEP) * 1e3)
        stop.set()
    return late


def main() -> None:
    for mode in ("alone", "ticker", "thread hops"):
        late = trio.run(overshoots, mode)
        deciles = statistics.quantiles(late, n=10)
        print(
            f"{mode:<12} mean {statistics.mean(late):.2f} ms  "
            f"median {statistics.median(late):.2f} ms  p90 {deciles[-1]:.2f} ms"
        )


if __name__ == "__main__":
    main()
