"""Uses every public name the way a user would; mypy --strict checks it (never run)."""

from __future__ import annotations

import trio

from trio_batch import (
    BatchEngine,
    Busy,
    Caller,
    CallerBusy,
    Config,
    EngineStatistics,
    FetchFunc,
    Hooks,
    Job,
    JobStatus,
    NoTargets,
    Options,
    Result,
    RetryLater,
    Snapshot,
    StoreError,
    SubmitError,
    Submitted,
    Target,
    TargetError,
    TargetState,
    TargetStatus,
    TooManyTargets,
    open_engine,
)
from trio_batch.stores import MemoryStore, SQLiteStore, Store


async def fetch(caller: Caller, target: Target) -> Result:
    if target.options.grep:
        raise TargetError("no match", hint="try another pattern", status=422)
    if caller.workspace == "busy":
        raise RetryLater("rate limited", after=3.0)
    return Result(content="", meta={"status": 200})


def on_target(error: BaseException | None, seconds: float, size: int) -> None:
    if isinstance(error, TargetError):
        print(error.status, seconds, size)


async def use(store: Store) -> None:
    func: FetchFunc = fetch
    config = Config(workers=2, hooks=Hooks(job=print, target=on_target, depth=print))
    async with open_engine(store, func, config) as engine:
        assert isinstance(engine, BatchEngine)
        try:
            sub: Submitted = await engine.submit(
                Caller("me"), "fleet", [Target("https://example.org/", Options(mode="markdown"))]
            )
        except (NoTargets, TooManyTargets, CallerBusy, Busy) as exc:
            refused: SubmitError = exc
            print(refused)
            return
        job_id: str = sub.id
        reused: bool = sub.reused
        snap: Snapshot | None = await engine.status(job_id)
        if snap is not None:
            job: Job = snap.job
            live: bool = job.status in (JobStatus.QUEUED, JobStatus.RUNNING)
            first: TargetStatus = snap.targets[0]
            content = first.result.content if first.result is not None else ""
            print(live, reused, content, first.status is TargetState.DONE, job.created_at)
        ok: bool = await engine.cancel(job_id)
        touched: bool = await engine.touch(job_id)
        stats: EngineStatistics = engine.statistics()
        print(ok, touched, stats.live_jobs)


async def main() -> None:
    await use(MemoryStore())
    try:
        async with SQLiteStore.open("jobs.sqlite") as store:
            await use(store)
    except StoreError as exc:
        print(exc)


if __name__ == "__main__":
    trio.run(main)
