"""Every attack of issue 12 against a served app: the answer, other callers, memory, liveness.

The service is the real thing on 127.0.0.1: ``create_app`` + ``serve`` over an engine and a
``WebFetcher`` (shaping workers with 1 s of CPU time and 512 MiB each), fetching from a local
site. For each attack, while it runs, a second caller (bob) polls ``/healthz`` and fetches an
11-byte page over and over; each of those answers must come within RESPONSIVE seconds, or
within SLOWDOWN times bob's slowest answer just before the attack when the machine is so loaded
that this is more. The RSS of the test process and of every process it started is sampled the
whole time and must stay bounded, and the service must still answer afterwards.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import trio

from tests.support import LocalSite, Reply, redirect, serve_site, wait_ended
from tests.web.support import JSON, LOOPBACK, TEXT
from trio_batch import BatchEngine, Config, open_engine
from trio_batch.http import KeyRecord, KeyRing, create_app, hash_key, serve
from trio_batch.stores import MemoryStore
from trio_batch.web import WebFetcher, precheck

ALICE_KEY, BOB_KEY = "tb_hostile-alice", "tb_hostile-bob"
CPU_SECONDS = 1.0
MEMORY = 512 * 2**20
WORKERS = 2
RESPONSIVE = 2.0
"""Seconds within which bob's /healthz and small fetch must answer while an attack runs, on a
machine that answers bob at once without it (an attack that blocked the service would hold bob
for its whole CPU_SECONDS and more; on this 2-core VM a fair answer took up to 1.2 s)."""
CALM_ROUNDS = 3
"""Probe rounds measured before each attack, with nothing else running in the service."""
SLOWDOWN = 10.0
"""How many times his slowest answer without an attack bob may wait while one runs, when that
is more than RESPONSIVE: the bound grows with the machine's load, measured in the same test.
A fair service stayed within 8.1 times over 190 attacks at load 6-17 (a probe's worst is
heavy-tailed on a loaded machine); a blocked one holds bob for the attack's whole CPU time
(1 s of CPU: 200 calm answers on an idle machine)."""
SERVICE_GROWTH = 200 * 2**20
"""Most the test process (client, service and site in one) may grow during an attack."""
HTML = [("content-type", "text/html")]
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _route(site: LocalSite) -> None:
    """The site's pages: small ones for bob, big and hostile ones for the attacks."""
    site.route("/small.txt", Reply(body=b"hello world", headers=TEXT))
    site.route("/data.json", Reply(body=b'{"items": [{"name": "a"}, {"name": "b"}]}', headers=JSON))
    site.route("/words-8k.txt", Reply(body=b"word\n\n" * 8_000, headers=TEXT))
    site.route("/words-60k.txt", Reply(body=b"word\n\n" * 60_000, headers=TEXT))
    site.route("/aaa.txt", Reply(body=b"a" * 30_000 + b"!", headers=TEXT))
    site.route("/hostile.html", Reply(body=b"<div>" * 200_000, headers=HTML))
    for name, location in REDIRECTS.items():
        site.route(f"/r/{name}", redirect(location))
    site.route("/r/loop", redirect("/r/loop"))


REDIRECTS = {
    "https-x": "https:x",
    "odd-path": "http:127.0.0.1:8/",
    "bad-port": "http://[::1",
    "ftp": "ftp://files.example/x",
    "private": "http://10.0.0.1/",
    "metadata": "http://169.254.169.254/latest/meta-data/",
}


@dataclass
class Service:
    """The served app and what the probes and the sampler saw."""

    client: httpx.AsyncClient
    site: LocalSite
    engine: BatchEngine
    worst_probe: float = 0.0
    probes: int = 0
    probed: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) after each probe round."""
    probe_failures: list[str] = field(default_factory=list)
    peak_self: int = 0
    peak_total: int = 0

    def url(self, path: str) -> str:
        return self.site.url(path)

    async def fetch(self, url: str, key: str = ALICE_KEY, **options: object) -> httpx.Response:
        body = {"url": url, "options": options} if options else {"url": url}
        return await self.client.post("/v1/fetch", json=body, headers=_auth(key))

    async def batch(self, *targets: object, key: str = ALICE_KEY) -> httpx.Response:
        return await self.client.post("/v1/batch", json={"targets": targets}, headers=_auth(key))

    async def finished(self, job_id: str) -> list[dict[str, object]]:
        """The job's targets once it has ended (woken by the engine's watch, not by time)."""
        await wait_ended(self.engine, job_id)
        r = await self.client.get(f"/v1/batch/{job_id}?results=1", headers=_auth(ALICE_KEY))
        targets: list[dict[str, object]] = r.json()["targets"]
        return targets


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def _descendants() -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [os.getpid()]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@asynccontextmanager
async def hostile_service() -> AsyncIterator[Service]:
    """The service on 127.0.0.1 with its site; both stop when the block ends."""
    keys = KeyRing(
        [
            KeyRecord("alice", "", "fleet", hash_key(ALICE_KEY)),
            KeyRecord("bob", "", "fleet", hash_key(BOB_KEY)),
        ]
    )
    config = Config(workers=4, jobs_per_caller=8, jobs_total=32)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        site = await serve_site(nursery)
        _route(site)
        async with (
            WebFetcher(
                allow=LOOPBACK,
                shape_workers=WORKERS,
                shape_cpu_seconds=CPU_SECONDS,
                shape_memory=MEMORY,
            ) as fetcher,
            open_engine(MemoryStore(), fetcher, config) as engine,
        ):
            app = create_app(
                engine,
                keys,
                fetch=fetcher,
                precheck=functools.partial(precheck, allow=LOOPBACK),
                access_log_enabled=False,
            )
            port: int = await nursery.start(
                lambda task_status: serve(
                    app, port=0, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
                yield Service(c, site, engine)
            stop.set()
        nursery.cancel_scope.cancel()


async def _probe(service: Service) -> None:
    """Bob, over and over: /healthz and an 11-byte page, each timed."""
    small = service.url("/small.txt")
    async with httpx.AsyncClient(base_url=service.client.base_url, timeout=30) as bob:
        while True:
            for name in ("healthz", "fetch"):
                start = trio.current_time()
                if name == "healthz":
                    r = await bob.get("/healthz")
                else:
                    r = await bob.post("/v1/fetch", json={"url": small}, headers=_auth(BOB_KEY))
                took = trio.current_time() - start
                service.worst_probe = max(service.worst_probe, took)
                if r.status_code != 200 or (name == "fetch" and "hello" not in r.text):
                    service.probe_failures.append(f"{name}: {r.status_code} {r.text[:100]}")
            service.probes += 1
            service.probed.set()
            service.probed = trio.Event()


async def _sample(service: Service) -> None:
    """The RSS of this process and of all its descendants (the shaping workers), sampled."""
    while True:
        own = _rss(os.getpid())
        service.peak_self = max(service.peak_self, own)
        service.peak_total = max(service.peak_total, own + sum(map(_rss, _descendants())))
        await trio.sleep(0.05)  # a sampling period, not a synchronisation


async def under_watch(service: Service, attack: Callable[[], Awaitable[None]]) -> None:
    """Run ``attack`` while bob probes and memory is sampled, then check both, and that the
    service still answers.

    Bob's answers are timed first without an attack (after a round that warms the service
    up), on the same machine under the same load, and the bound scales with that when the
    machine is slow: a loaded machine slows every answer, an attack that blocks the service
    holds bob for all its CPU time.
    """
    baseline = _rss(os.getpid())
    service.worst_probe, service.probes, service.peak_self, service.peak_total = 0.0, 0, 0, 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_sample, service)
        nursery.start_soon(_probe, service)
        await service.probed.wait()  # the first round warms the service up
        service.worst_probe = 0.0
        while service.probes < 1 + CALM_ROUNDS:
            await service.probed.wait()
        calm, service.worst_probe = service.worst_probe, 0.0
        before = service.probes
        await attack()
        while service.probes < before + 2:  # a probe round overlapped the attack, one followed
            await service.probed.wait()
        nursery.cancel_scope.cancel()

    bound = max(RESPONSIVE, SLOWDOWN * calm)
    assert [] == service.probe_failures
    assert service.worst_probe < bound, (
        f"bob waited {service.worst_probe:.2f} s while the attack ran; without it, at most "
        f"{calm:.2f} s (bound {bound:.2f} s)"
    )
    assert service.peak_self - baseline < SERVICE_GROWTH, service.peak_self - baseline
    assert service.peak_total < baseline + SERVICE_GROWTH + WORKERS * MEMORY
    after = await service.client.get("/healthz")
    assert 200 == after.status_code


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    async with hostile_service() as svc:
        yield svc


def limit_error(r: httpx.Response, *words: str) -> None:
    assert 422 == r.status_code, r.text
    body = r.json()
    assert body["error"].startswith("shaping this response")
    assert any(word in body["error"] for word in words), body["error"]
    assert "ask for less" in body["hint"]


# -- the attacks ----------------------------------------------------------------------------------


@pytest.mark.slow
class TestJq:
    @pytest.mark.parametrize(
        ("program", "words"),
        [
            ("def f: f; f", ("CPU time",)),
            ("[range(1e9)]", ("CPU time", "memory")),
            ("def f: 1 + f; f", ("memory", "CPU time")),
            ("last(range(1e8))", ("CPU time",)),
        ],
    )
    async def test_a_runaway_program_fails_alone(
        self, service: Service, program: str, words: tuple[str, ...]
    ) -> None:
        """A jq program that loops or allocates is stopped at its limit: a 422 with a hint;
        bob never waits, and the service neither grows nor dies (it used to freeze or abort)."""

        async def attack() -> None:
            limit_error(await service.fetch(service.url("/data.json"), jq=program), *words)

        await under_watch(service, attack)

    async def test_in_a_batch_the_target_fails_with_a_hint(self, service: Service) -> None:
        """The same program in a batch: the target fails with the limit and a hint."""

        async def attack() -> None:
            r = await service.batch(
                {"url": service.url("/data.json"), "options": {"jq": "def f: f; f"}}
            )
            assert 202 == r.status_code
            (target,) = await service.finished(r.json()["id"])
            assert "failed" == target["status"]
            assert "CPU time" in str(target["error"])
            assert "ask for less" in str(target["hint"])

        await under_watch(service, attack)


@pytest.mark.slow
class TestQuestion:
    @pytest.mark.parametrize("page", ["/words-8k.txt", "/words-60k.txt"])
    async def test_many_paragraphs_answer_promptly(self, service: Service, page: str) -> None:
        """8k paragraphs took 16 s and 60k did not answer in 20 s: now both answer."""

        async def attack() -> None:
            r = await service.fetch(service.url(page), question="word")
            assert 200 == r.status_code, r.text
            assert r.json()["result"]["meta"]["passages"]

        await under_watch(service, attack)

    async def test_two_big_questions_leave_room_for_others(self, service: Service) -> None:
        """Two 60k-paragraph questions at once used to hold both shaping threads, and another
        caller's 11-byte page got no answer in 15 s; bob's probes are that page."""

        async def attack() -> None:
            async def ask() -> None:
                r = await service.fetch(service.url("/words-60k.txt"), question="word")
                assert 200 == r.status_code, r.text

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                nursery.start_soon(ask)

        await under_watch(service, attack)


class TestGrep:
    @pytest.mark.parametrize(
        ("pattern", "fragment"),
        [
            ("a{9999999}", "grep repeats more than 1,000 times"),
            ("a{99999999}", "grep repeats more than 1,000 times"),
            ("(?V1)[[a]--[b]]", "(?V0) or (?V1)"),
            ("(?:a{1000}){1000}", "unroll to more than"),
        ],
    )
    async def test_refused_at_submit_without_compiling(
        self, service: Service, pattern: str, fragment: str
    ) -> None:
        """The patterns that stalled every caller for 9.5-25 s (or answered 500) are a 400
        naming the field, before anything compiles them."""

        async def attack() -> None:
            r = await service.batch(
                {"url": service.url("/small.txt"), "options": {"grep": pattern}}
            )
            assert 400 == r.status_code
            assert "targets[0].options" == r.json()["field"]
            assert fragment in r.json()["error"]
            single = await service.fetch(service.url("/small.txt"), grep=pattern)
            assert 400 == single.status_code

        await under_watch(service, attack)

    @pytest.mark.slow
    async def test_catastrophic_backtracking_fails_alone(self, service: Service) -> None:
        """(a|aa)+$ on 30,000 a's: stopped by grep's budget or the CPU limit, a 422."""

        async def attack() -> None:
            r = await service.fetch(service.url("/aaa.txt"), grep="(a|aa)+$")
            assert 422 == r.status_code, r.text
            assert r.json()["hint"]

        await under_watch(service, attack)


@pytest.mark.slow
async def test_quadratic_html_fails_alone(service: Service) -> None:
    """200,000 nested <div>s (HTML5 tree building is quadratic in the depth): stopped at the
    CPU limit."""

    async def attack() -> None:
        limit_error(await service.fetch(service.url("/hostile.html")), "CPU time")

    await under_watch(service, attack)


class TestUnicode:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"url": "URL", "\ud800": 1}, "targets[0].\\ud800"),
            ({"url": "URL", "options": {"\udfff": "x"}}, "targets[0].options.\\udfff"),
            ({"url": "URL", "options": {"grep": "\ud800"}}, "targets[0].options.grep"),
            ({"url": "URL", "options": {"question": "\ud800 x"}}, "targets[0].options.question"),
            ({"url": "URL", "options": {"jq": '"\ud800"'}}, "targets[0].options.jq"),
            ({"url": "URL/\ud800"}, "targets[0].url"),
        ],
    )
    async def test_lone_surrogates_are_a_400_naming_the_field(
        self, service: Service, body: dict[str, object], field: str
    ) -> None:
        """Lone surrogates in a name, a URL, grep, question or jq: a 400 naming the field."""
        raw = json.dumps({"targets": [body]}).replace("URL", service.url("/small.txt"))

        async def attack() -> None:
            r = await service.client.post(
                "/v1/batch", content=raw.encode(), headers=_auth(ALICE_KEY)
            )
            assert (400, field) == (r.status_code, r.json()["field"])

        await under_watch(service, attack)


class TestRedirects:
    @pytest.mark.parametrize("name", [*REDIRECTS, "loop"])
    async def test_every_redirect_failure_is_a_4xx_or_502(
        self, service: Service, name: str
    ) -> None:
        """An unparsable Location, another scheme, a refused address, too many hops: a 4xx or
        502 with a hint on /v1/fetch (https:x answered 500 before)."""

        async def attack() -> None:
            r = await service.fetch(service.url(f"/r/{name}"))
            assert 400 <= r.status_code < 500 or r.status_code == 502, r.text
            assert r.json()["hint"]

        await under_watch(service, attack)

    async def test_in_a_batch_each_fails_with_a_hint(self, service: Service) -> None:
        """In a batch, each such target fails with a hint, never an internal error."""

        async def attack() -> None:
            names = [*REDIRECTS, "loop"]
            r = await service.batch(*[{"url": service.url(f"/r/{n}")} for n in names])
            assert 202 == r.status_code
            targets = await service.finished(r.json()["id"])
            for target in targets:
                assert "failed" == target["status"]
                assert "internal error" != target["error"]
                assert target["hint"]

        await under_watch(service, attack)


class TestBodies:
    @pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
    async def test_over_cap_bodies_get_a_readable_413(
        self, service: Service, chunked: bool
    ) -> None:
        """A 300 KiB body on a kept-alive connection: the client reads the 413 every time."""

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(300):
                yield b"x" * 1024

        async def attack() -> None:
            for _ in range(5):
                content = chunks() if chunked else b"x" * 300 * 1024
                r = await service.client.post(
                    "/v1/batch", content=content, headers=_auth(ALICE_KEY)
                )
                assert (413, "body") == (r.status_code, r.json()["field"])

        await under_watch(service, attack)
