"""POLITE: host budgets on the real clock, the figures issue 23 states.

    python -m bench.politeness [--repeats N]

or ``python -m bench.run --only POLITE`` (which adds the figures to the bench report). One
engine over ``MemoryStore`` with a fetch that sleeps (50 ms) and records when each request of
each host started (Trio's real clock):

- **Spacing.** Five callers with four targets each on one host whose budget is one request in
  flight and 200 ms between starts, eight workers: the least gap between two starts on that host
  (goal >= 190 ms), and the most requests ever in flight there (goal 1).
- **The other host runs free.** Meanwhile a sixth caller's five targets on another host: its time
  against the same job run alone (goal within 20 %).
- **429 with Retry-After: 2.** Three callers on a host that answers "busy, retry after 2 s" for
  its first 5 s: the least gap between two requests after the first rate-limit event (goal
  >= 2 s, from all callers together), and whether every job ended done.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from trio_batch import (
    Caller,
    Config,
    Hooks,
    HostBudget,
    JobStatus,
    Result,
    RetryLater,
    Target,
    open_engine,
)
from trio_batch.stores import MemoryStore

from ._harness import Figure, log

FETCH_SECONDS = 0.05
INTERVAL = 0.2


@dataclass
class Hosts:
    """A fake web of hosts: each request's start, the most in flight, and busy windows."""

    starts: dict[str, list[float]] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    most: dict[str, int] = field(default_factory=dict)
    busy_until: dict[str, float] = field(default_factory=dict)

    async def fetch(self, caller: Caller, target: Target) -> Result:
        host = scope(target)
        self.starts.setdefault(host, []).append(trio.current_time())
        self.in_flight[host] = self.in_flight.get(host, 0) + 1
        self.most[host] = max(self.most.get(host, 0), self.in_flight[host])
        try:
            await trio.sleep(FETCH_SECONDS)
        finally:
            self.in_flight[host] -= 1
        if trio.current_time() < self.busy_until.get(host, -1.0):
            raise RetryLater("429 Too Many Requests", after=2.0)
        return Result("ok")


def scope(target: Target) -> str:
    return target.url.split("/")[2]


def targets(host: str, n: int) -> list[Target]:
    return [Target(f"https://{host}/{i}") for i in range(n)]


async def run_jobs(
    hosts: Hosts, budget: HostBudget, jobs: Sequence[tuple[str, list[Target]]]
) -> dict[str, float]:
    """Run ``jobs`` (caller, targets) at once; each caller's seconds from submit to end."""
    ended: dict[str, float] = {}
    all_ended = trio.Event()
    ids: dict[str, str] = {}

    def on_job(event: str) -> None:
        if event not in ("created", "reused") and len(ended) + 1 >= len(jobs):
            all_ended.set()

    config = Config(
        workers=8, max_workers=8, jobs_per_caller=1, jobs_total=16, retry_wait=0.5,
        hooks=Hooks(job=on_job),
    )  # fmt: skip
    async with open_engine(
        MemoryStore(), hosts.fetch, config, budget=budget, scope=scope
    ) as engine:
        t0 = trio.current_time()
        for caller, job in jobs:
            ids[caller] = (await engine.submit(Caller(caller), "fleet", job)).id
        with trio.fail_after(120):
            while len(ended) < len(jobs):
                for caller, job_id in ids.items():
                    found = await engine.job(job_id)
                    if caller not in ended and found is not None and not found.status.live:
                        ended[caller] = trio.current_time() - t0
                        if found.status is not JobStatus.DONE:
                            raise AssertionError(f"{caller}'s job ended {found.status.value}")
                await trio.sleep(0.01)
    return ended


async def spacing_run() -> tuple[float, int, float]:
    """Least gap on the budgeted host, the most in flight there, the other host's ratio to solo."""
    hosts = Hosts()
    crowd = [(f"c{i}", targets("shared.test", 4)) for i in range(5)]
    ended = await run_jobs(
        hosts,
        HostBudget(concurrency=1, interval=INTERVAL),
        [*crowd, ("solo", targets("b.test", 5))],
    )
    alone = await run_jobs(
        Hosts(), HostBudget(concurrency=1, interval=INTERVAL), [("solo", targets("b.test", 5))]
    )
    gaps = [b - a for a, b in itertools.pairwise(hosts.starts["shared.test"])]
    return min(gaps), hosts.most["shared.test"], ended["solo"] / alone["solo"]


async def backoff_run() -> float:
    """The least gap between requests to a host answering 429 (Retry-After: 2) once it began."""
    hosts = Hosts()
    t0 = trio.current_time()
    hosts.busy_until["busy.test"] = t0 + 5.0
    await run_jobs(
        hosts, HostBudget(concurrency=2), [(f"c{i}", targets("busy.test", 2)) for i in range(3)]
    )
    starts = hosts.starts["busy.test"]
    first_429 = starts[0] + FETCH_SECONDS
    later = [t for t in starts if first_429 <= t < t0 + 5.0]
    return min((b - a for a, b in itertools.pairwise(later)), default=float("inf"))


def run_politeness(repeats: int = 3) -> list[Figure]:
    """The POLITE figures, ``repeats`` runs each."""
    gaps: list[float] = []
    most: list[float] = []
    ratios: list[float] = []
    backoff_gaps: list[float] = []
    for _ in range(repeats):
        gap, top, ratio = trio.run(spacing_run)
        gaps.append(gap)
        most.append(float(top))
        ratios.append(ratio)
        backoff_gaps.append(trio.run(backoff_run))
        log(
            f"POLITE spacing {gap * 1000:.0f} ms (most in flight {top}), other host "
            f"{ratio:.2f}x its solo time, 429 gap {backoff_gaps[-1]:.2f} s"
        )

    def figure(name: str, unit: str, values: list[float], higher: bool, goal: float) -> Figure:
        extra = {"interval": INTERVAL, "fetch_seconds": FETCH_SECONDS, "goal": goal}
        return Figure("POLITE", "memory", "trio-batch", name, unit, values, higher, extra)

    return [
        figure("least gap on a budgeted host", "s", gaps, True, 0.19),
        figure("most in flight on it", "requests", most, False, 1),
        figure("other host vs solo", "x", ratios, False, 1.2),
        figure("least gap while 429 (Retry-After 2)", "s", backoff_gaps, True, 2.0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each figure (3)")
    args = parser.parse_args()
    for figure in run_politeness(args.repeats):
        print(
            f"{figure.name:40} {statistics.median(figure.values):8.3f} {figure.unit} "
            f"(goal {figure.extra['goal']})"
        )


if __name__ == "__main__":
    main()
