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
    NotRetryable,
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
    Webhook,
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
        try:
            again: Submitted | None = await engine.retry(
                Caller("me"), "fleet", job_id, webhook=Webhook("https://hooks.example/", ("end",))
            )
        except NotRetryable as exc:
            print(exc)
        else:
            print(again is not None and again.reused)
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


async def follow(engine: BatchEngine, job_id: str) -> None:
    """The engine's reads and watch, as the HTTP streams use them."""
    with engine.watch(job_id) as watch:
        job = await engine.job(job_id)
        done: int = 0 if job is None else job.targets_done
        await watch.wait()
    summary = await engine.summary(job_id)
    if summary is not None:
        counts: tuple[int, int, int, int] = (
            summary.pending,
            summary.running,
            summary.done,
            summary.failed,
        )
        page = await engine.jobs(summary.job.caller, statuses=[JobStatus.DONE], limit=10)
        older = await engine.jobs("alice", before=(page[-1].job.created_at, page[-1].job.id))
        print(done, counts, len(older))
    chunk: list[TargetStatus] = await engine.targets(
        job_id, after=-1, limit=64, states=[TargetState.FAILED], results=False
    )
    watchers: int = engine.watchers
    print(chunk, watchers)


async def client_use() -> None:
    """The HTTP client, typed."""
    from trio_batch.client import (
        BatchEvent,
        BatchSummary,
        ClientError,
        SiteMap,
        TargetLine,
        open_client,
    )

    async with open_client("http://127.0.0.1:8080", "tb_key", request_timeout=10) as client:
        try:
            sub: Submitted = await client.submit(["https://example.org/", Target("https://a.b/")])
        except CallerBusy as exc:
            wait: float | None = exc.retry_after
            print(wait)
            return
        except ClientError as exc:
            print(exc.status, exc.error, exc.hint, exc.field, exc.retry_after)
            return
        summary: BatchSummary = await client.status(sub.id)
        print(summary["counts"]["done"], summary["links"]["events"])
        async with client.results(sub.id, follow=True, state=["done"]) as lines:
            async for line in lines:
                row: TargetLine = line
                print(row["idx"], row["result"]["content"] if row["result"] else row["error"])
        async for event in client.events(sub.id):
            seen: BatchEvent = event
            print(seen.id, seen.event, seen.data)
        async for job in client.jobs(status="live"):
            print(job["id"])
        cancelled: bool = await client.cancel(sub.id)
        retried: Submitted = await client.retry(sub.id, webhook={"url": "https://hooks.example/"})
        print(retried.id)
        final: BatchSummary = await client.wait(sub.id)
        print(cancelled, final["status"])
        wider: Submitted = await client.submit(["https://example.org/"], concurrency=4)
        site: SiteMap = await client.map("https://example.org/", limit=10)
        print(wider.reused, site["urls"], site["complete"])
