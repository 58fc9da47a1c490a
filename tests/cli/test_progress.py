"""The progress display: rich on a terminal, plain lines elsewhere (no screenshots needed)."""

from __future__ import annotations

import dataclasses
import io

import trio
from rich.console import Console

from trio_batch import Caller, Config, Hooks, HostBudget, RetryLater, Target, open_engine
from trio_batch._cli._progress import ProgressTracker, render_plain, render_rich, show_progress
from trio_batch.stores import MemoryStore
from trio_batch.testing import ScriptedFetch


def _recording_console() -> Console:
    return Console(record=True, width=120, file=io.StringIO(), force_terminal=True)


def _until_idle(tracker: ProgressTracker, idle: trio.Event) -> Hooks:
    """The tracker's hooks, plus setting ``idle`` when the last live job finishes."""

    def depth(n: int) -> None:
        if n == 0:
            idle.set()

    return dataclasses.replace(tracker.hooks(), depth=depth)


class TestRender:
    def test_rich_display_shows_the_bar_counts_rotation_and_live_jobs(self) -> None:
        """The live display has the overall bar, counts, rotation strip and a line per live job."""
        tracker = ProgressTracker(total=10, clock=lambda: 0.0)
        view = tracker.add_job("a" * 32, "alice", 6)
        view.done, view.failed, view.status = 2, 1, "running"
        view.current = "http://127.0.0.1:8080/articles/3"
        tracker.add_job("b" * 32, "bob", 4).status = "done"
        tracker.rotation.extend(["alice", "bob", "alice"])
        tracker.callers.update({"alice", "bob"})
        console = _recording_console()

        console.print(render_rich(tracker))

        text = console.export_text()
        assert "overall" in text
        assert "3/10" in text
        assert "done 2  failed 1  busy-retrying 0" in text
        assert "rotation aba" in text
        assert "alice aaaaaaaa  running" in text
        assert "/articles/3" in text
        assert "bob bbbbbbbb" not in text  # finished jobs leave the live list

    def test_plain_line_has_the_counts(self) -> None:
        """The plain progress line counts targets, failures, retries and live jobs."""
        tracker = ProgressTracker(total=5, clock=lambda: 0.0)
        view = tracker.add_job("c" * 32, "cli", 5)
        view.done, view.failed, view.status = 3, 1, "running"

        line = render_plain(tracker)

        assert line.startswith("trio-batch: 4/5 targets (3 done, 1 failed), 0 busy-retrying, ")
        assert line.endswith("1 live job, 0:00 elapsed")


class TestShowProgress:
    async def test_rich_display_follows_a_real_engine_to_the_end(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Driven by hooks and status polls, the last frame shows every target finished."""
        fetch = ScriptedFetch(duration=1.0)
        fetch.script("https://b.example/2", RetryLater(after=3.0))
        tracker = ProgressTracker()
        console = _recording_console()
        idle = trio.Event()
        hooks = _until_idle(tracker, idle)
        config = Config(workers=2, jobs_per_caller=1, retry_wait=1.0, hooks=hooks)

        async with (
            open_engine(MemoryStore(), tracker.wrap(fetch), config) as engine,
            show_progress(tracker, engine, stream=io.StringIO(), mode="auto", console=console),
        ):
            for name in ("alice", "bob"):
                targets = [Target(f"https://{name[0]}.example/{i}") for i in range(3)]
                sub = await engine.submit(Caller(name), "fleet", targets)
                tracker.add_job(sub.id, name, len(targets))
            await idle.wait()

        text = console.export_text()
        assert "6/6" in text
        assert "done 6  failed 0" in text
        assert "retries so far 1" in text
        assert "rotation " in text

    async def test_plain_lines_every_few_seconds_when_not_a_terminal(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """Off a terminal, a plain line every `every` seconds and a final one."""
        fetch = ScriptedFetch(duration=2.0)
        tracker = ProgressTracker()
        stream = io.StringIO()
        idle = trio.Event()
        config = Config(hooks=_until_idle(tracker, idle))

        async with (
            open_engine(MemoryStore(), fetch, config) as engine,
            show_progress(tracker, engine, stream=stream, every=3.0),
        ):
            targets = [Target(f"https://a.example/{i}") for i in range(3)]
            sub = await engine.submit(Caller("cli"), "fleet", targets)
            tracker.add_job(sub.id, "cli", 3)
            await idle.wait()

        lines = stream.getvalue().splitlines()
        assert len(lines) == 3  # at 3 s and 6 s while it runs, then the final line
        assert lines[-1].startswith("trio-batch: 3/3 targets (3 done, 0 failed)")

    async def test_the_first_frame_comes_within_a_second_even_before_the_engine(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """While a large input is checked (no engine yet), a plain line says so after 1 s."""
        tracker = ProgressTracker(total=100_000)
        tracker.phase, tracker.checked = "checking", 2000
        stream = io.StringIO()

        async with show_progress(tracker, None, stream=stream, mode="plain"):
            await trio.sleep(1.5)  # virtual time: the frame is due at 1 s, the next at 6 s
            first = stream.getvalue()

        assert first == (
            "trio-batch: checking the input: 2,000/100,000 targets checked, 0:01 elapsed\n"
        )


class TestWaitingForHosts:
    async def test_a_job_waiting_for_its_host_is_counted(self) -> None:
        """Host budget 1: one job holds the host, the other waits: both displays say 1."""
        fetch = ScriptedFetch()
        gate = fetch.hold("https://h.test/a")
        tracker = ProgressTracker(total=2, clock=lambda: 0.0)
        config = Config(workers=2, max_workers=2, jobs_per_caller=2)
        async with open_engine(
            MemoryStore(),
            fetch,
            config,
            budget=HostBudget(concurrency=1),
            scope=lambda t: "h.test:443",
        ) as engine:
            for url in ("https://h.test/a", "https://h.test/b"):
                sub = await engine.submit(Caller("cli"), "fleet", [Target(url)])
                tracker.add_job(sub.id, "cli", 1)
            await trio.testing.wait_all_tasks_blocked()
            await tracker.poll(engine)
            gate.set()
        console = _recording_console()
        console.print(render_rich(tracker))

        assert 1 == tracker.waiting
        assert ", 1 waiting for their hosts, " in render_plain(tracker)
        assert "waiting for their hosts 1" in console.export_text()

    def test_no_job_waits_once_every_job_has_ended(self) -> None:
        """A crawl's view (its caller keeps its status) that ended after the last poll counted
        it waiting: the last frame says 0, not the stale 1."""
        tracker = ProgressTracker(total=10, clock=lambda: 0.0)
        view = tracker.add_job("c1", "crawl", 10, polled=False)
        view.status, tracker.waiting = "running", 1
        assert ", 1 waiting for their hosts, " in render_plain(tracker)

        view.status = "done"
        console = _recording_console()
        console.print(render_rich(tracker))

        assert ", 0 waiting for their hosts, " in render_plain(tracker)
        assert "waiting for their hosts 0" in console.export_text()
