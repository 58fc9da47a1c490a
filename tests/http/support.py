"""What the HTTP tests share: callers and keys, the app over a live engine, and webhook receivers.

- :func:`open_api` (and :class:`Api`): an app over an engine on a :class:`MemoryStore`, with an
  httpx client talking to it in-process; ``auth``, ``make_keys`` and the keys ``ALICE``/``BOB``.
- :func:`open_service` (and :class:`Service`): the same with webhook deliveries running, and a
  :class:`Receiver` on 127.0.0.1 that records each delivery and signals it; :class:`Outbox`
  signals each delivery outcome the dispatcher records, so a test waits for events, never for
  a time; ``webhook_keys`` gives alice a webhook secret.
- :func:`docs_verifier`: the receiver's verifier exactly as docs/operations.md shows it.

Fixtures stay in ``conftest.py``; these are the builders they and the test modules use.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import ipaddress
import json
import re
import shutil
import subprocess
import sys
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from tests.support import WallClock
from trio_batch import BatchEngine, Config, open_engine
from trio_batch.http import (
    DeliveryPolicy,
    KeyRecord,
    KeyRing,
    create_app,
    hash_key,
    open_deliveries,
    serve,
)
from trio_batch.metrics import PrometheusMetrics
from trio_batch.stores import MemoryStore, ServiceStore, Store
from trio_batch.testing import ScriptedFetch, asgi_lifespan
from trio_batch.web import precheck

ALICE = "tb_alice-test-key"
BOB = "tb_bob-test-key"


def auth(key: str = ALICE) -> dict[str, str]:
    """The header that sends ``key`` as the bearer."""
    return {"Authorization": f"Bearer {key}"}


def make_keys() -> KeyRing:
    """Alice (workspace ``lab``, ``fleet``) and bob (``restricted``), neither with a secret."""
    return KeyRing(
        [
            KeyRecord("alice", "lab", "fleet", hash_key(ALICE)),
            KeyRecord("bob", "", "restricted", hash_key(BOB)),
        ]
    )


lifespan = asgi_lifespan
"""The ASGI lifespan a server would send: httpx's ASGI transport does not."""


@dataclass
class Api:
    """An app over a live engine, and a client talking to it in-process."""

    client: httpx.AsyncClient
    engine: BatchEngine
    fetch: ScriptedFetch
    metrics: PrometheusMetrics
    wall: WallClock
    app: ASGIApp

    async def submit(self, *urls: str, key: str = ALICE, **extra: Any) -> httpx.Response:
        """POST a batch of ``urls`` (``extra`` goes into each target)."""
        targets = [{"url": u, **extra} for u in urls]
        return await self.client.post("/v1/batch", json={"targets": targets}, headers=auth(key))

    async def get(self, path: str, key: str = ALICE, **params: Any) -> httpx.Response:
        """GET ``path`` as the caller of ``key``."""
        return await self.client.get(path, params=params, headers=auth(key))


@contextlib.asynccontextmanager
async def open_api(
    config: Config | None = None,
    *,
    fetch: ScriptedFetch | None = None,
    with_fetch: bool = True,
    store: Store | None = None,
    with_lifespan: bool = True,
    engine_kwargs: dict[str, Any] | None = None,
    **app_kwargs: Any,
) -> AsyncIterator[Api]:
    """An :class:`Api` over an engine of ``config`` (its caps; its hooks are the metrics')."""
    fetch = fetch if fetch is not None else ScriptedFetch()
    metrics = PrometheusMetrics()
    wall = WallClock()
    base = config or Config(ttl=3600)
    config = Config(
        ttl=base.ttl,
        targets_per_job=base.targets_per_job,
        jobs_per_caller=base.jobs_per_caller,
        jobs_total=base.jobs_total,
        workers=base.workers,
        hooks=metrics.hooks(),
    )
    store = store if store is not None else MemoryStore()

    async with open_engine(
        store, fetch, config, wall_clock=wall, **(engine_kwargs or {})
    ) as engine:
        app_kwargs.setdefault("precheck", precheck)
        app = create_app(
            engine,
            make_keys(),
            fetch=fetch if with_fetch else None,
            metrics=metrics,
            wall_clock=wall,
            **app_kwargs,
        )
        transport = httpx.ASGITransport(app=app)
        async with contextlib.AsyncExitStack() as stack:
            if with_lifespan:
                await stack.enter_async_context(lifespan(app))
            client = await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://api.test")
            )
            yield Api(client, engine, fetch, metrics, wall, app)


# -- webhooks -------------------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
LOOPBACK = [ipaddress.ip_network("127.0.0.1/32")]
FAST = DeliveryPolicy(
    first_wait=0.05, max_wait=0.2, jitter=0.0, poll=0.2, min_gap=0.005, timeout=30.0
)
"""Short retry waits, without jitter (so a test knows each wait), and a timeout far past them."""


def webhook_keys() -> KeyRing:
    """Alice with a webhook secret (:data:`SECRET`), bob without one."""
    return KeyRing(
        [
            KeyRecord("alice", "lab", "fleet", hash_key(ALICE), webhook_secret=SECRET),
            KeyRecord("bob", "", "fleet", hash_key(BOB)),
        ]
    )


@dataclass
class Delivery:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """A tiny HTTP/1.1 server that records each request and answers the scripted statuses."""

    def __init__(self) -> None:
        self.got: list[Delivery] = []
        self.statuses: deque[int] = deque()
        self.port = 0
        self._arrived = trio.Event()

    async def handle(self, stream: trio.SocketStream) -> None:
        """Read one request, record it, answer the next scripted status (200 when none)."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        first, *lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines)}
        while len(body) < int(headers.get("content-length", "0")):
            body += await stream.receive_some(65536)

        self.got.append(Delivery(first.split()[1], headers, body))
        self._arrived.set()
        self._arrived = trio.Event()

        status = self.statuses.popleft() if self.statuses else 200
        answer = f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        await stream.send_all(answer.encode())
        await stream.aclose()

    def url(self, host: str = "127.0.0.1", path: str = "/hook") -> str:
        return f"http://{host}:{self.port}{path}"

    async def wait_for(self, n: int) -> list[Delivery]:
        """Wait until ``n`` requests have arrived, woken by each one; all of them so far."""
        while len(self.got) < n:
            await self._arrived.wait()
        return self.got


@contextlib.asynccontextmanager
async def open_receiver() -> AsyncIterator[Receiver]:
    """A :class:`Receiver` listening on a free port of 127.0.0.1 while the block runs."""
    receiver = Receiver()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, receiver.handle, 0, host="127.0.0.1")
        )
        receiver.port = listeners[0].socket.getsockname()[1]
        yield receiver
        nursery.cancel_scope.cancel()


class Outbox:
    """A store, as the dispatcher sees it, that signals each delivery outcome it records.

    Every attempt ends in one ``hook_advance`` (delivered, retried or given up); a test waits
    for a number of them, or for a condition checked after each, instead of for a time.
    """

    def __init__(self, store: ServiceStore) -> None:
        self._store = store
        self.recorded = 0
        self._changed = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def hook_advance(self, *args: Any, **kwargs: Any) -> bool:
        """The store's ``hook_advance``, then a signal to the waiting test."""
        try:
            return bool(await self._store.hook_advance(*args, **kwargs))
        finally:
            self.recorded += 1
            self._changed.set()
            self._changed = trio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, checking it after each recorded outcome."""
        while not condition():
            await self._changed.wait()

    async def wait_recorded(self, n: int) -> None:
        """Wait until ``n`` outcomes have been recorded."""
        await self.wait_until(lambda: self.recorded >= n)


@dataclass
class Service:
    """An app with webhook deliveries, a receiver, and the pieces a test looks at."""

    client: httpx.AsyncClient
    fetch: ScriptedFetch
    metrics: PrometheusMetrics
    outbox: Outbox
    receiver: Receiver
    transport: httpx.AsyncBaseTransport
    engine: BatchEngine
    reads: Callable[[], int]
    """The dispatcher's reads of the store's due webhooks so far."""

    async def submit(self, n: int = 2, key: str = ALICE, **webhook: Any) -> httpx.Response:
        """POST ``n`` targets with a webhook (the receiver's URL unless ``webhook`` says)."""
        webhook.setdefault("url", self.receiver.url())
        targets = [{"url": f"https://example.org/{i}"} for i in range(n)]
        body = {"targets": targets, "webhook": webhook}
        return await self.client.post("/v1/batch", json=body, headers=auth(key))

    def count(self, outcome: str) -> float:
        """Deliveries with ``outcome`` (delivered, retried, given_up) in the metrics."""
        return delivery_count(self.metrics, outcome)


def delivery_count(metrics: PrometheusMetrics, outcome: str) -> float:
    """Deliveries with ``outcome`` (delivered, retried, given_up) in ``metrics``."""
    value = metrics.registry.get_sample_value(
        "trio_batch_webhook_deliveries_total", {"outcome": outcome}
    )
    return value or 0.0


@contextlib.asynccontextmanager
async def open_service(
    store: ServiceStore | None = None,
    *,
    allow: Any = LOOPBACK,
    policy: DeliveryPolicy = FAST,
    **kwargs: Any,
) -> AsyncIterator[Service]:
    """An app over an engine on ``store`` (a new MemoryStore), with deliveries to a receiver."""
    store = store if store is not None else MemoryStore()
    outbox = Outbox(store)
    fetch = ScriptedFetch()
    metrics = PrometheusMetrics()
    keys = webhook_keys()

    async with (
        open_receiver() as receiver,
        open_engine(store, fetch, Config(ttl=3600, hooks=metrics.hooks())) as engine,
    ):
        app = create_app(
            engine, keys, precheck=functools.partial(precheck, allow=LOOPBACK), metrics=metrics
        )
        transport = httpx.ASGITransport(app=app)
        async with (
            lifespan(app),
            httpx.AsyncClient(transport=transport, base_url="http://api.test") as client,
            open_deliveries(
                cast("ServiceStore", outbox),
                engine,
                keys,
                allow=allow,
                metrics=metrics,
                policy=policy,
                **kwargs,
            ) as dispatcher,
        ):
            yield Service(
                client,
                fetch,
                metrics,
                outbox,
                receiver,
                transport,
                engine,
                lambda: dispatcher.reads,
            )


def docs_verifier() -> Callable[..., bool]:
    """The receiver's verifier exactly as docs/operations.md shows it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    code = next(
        b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "def verify_webhook" in b
    )
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/operations.md", "exec"), namespace)
    return cast("Callable[..., bool]", namespace["verify_webhook"])


# -- trio-batch serve in child processes, against a local site ------------------------------

PAGE_SECONDS = 0.25
"""How long a page of :func:`page_site` takes: long enough that a batch outlasts a kill."""


def page_site(hits: Counter[str]) -> Starlette:
    async def page(request: Request) -> Response:
        n = request.path_params["n"]
        hits[request.url.path] += 1
        await trio.sleep(PAGE_SECONDS)
        return HTMLResponse(f"<html><body><h1>Page {n}</h1><p>Text of page {n}.</p></body>")

    return Starlette(routes=[Route("/page/{n:int}", page)])


@contextlib.asynccontextmanager
async def local_site(hits: Counter[str]) -> AsyncIterator[int]:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(
            lambda task_status: serve(
                page_site(hits), port=0, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        yield port
        stop.set()


class Server:
    """``trio-batch serve --resume`` in a child process, started again after each kill."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.env = env
        self.log = bytearray()
        self.starts = 0

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[tuple[trio.Process, int]]:
        cmd = [sys.executable, "-c", "from trio_batch._cli import entry; entry()", "serve"]
        proc = await trio.lowlevel.open_process(
            [*cmd, *self.args], stderr=subprocess.PIPE, env=self.env
        )
        self.starts += 1
        try:
            assert proc.stderr is not None
            with trio.fail_after(60):
                port = await self._read_port(proc.stderr)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._drain, proc.stderr)
                yield proc, port
                nursery.cancel_scope.cancel()
        finally:
            if proc.returncode is None:
                proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()

    async def _read_port(self, stream: trio.abc.ReceiveStream) -> int:
        start = len(self.log)
        while True:
            chunk = await stream.receive_some()
            if not chunk:
                raise AssertionError(f"the server exited before listening:\n{self.log.decode()}")
            self.log += chunk
            found = re.search(rb"serving the trio-batch API on \S+ port (\d+)", self.log[start:])
            if found:
                return int(found.group(1))

    async def _drain(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.log += chunk


async def wait_ended_over_http(
    client: httpx.AsyncClient, job_ids: list[str]
) -> list[dict[str, object]]:
    """The jobs' summaries once each has ended, for a service in another process (no engine
    here to watch): each job's ``/events`` stream is followed to its ``end`` event, the HTTP
    face of the engine's watch that ``tests.support.wait_ended`` waits on."""
    summaries = []
    with trio.fail_after(120):
        for job_id in job_ids:
            async with client.stream("GET", f"/v1/batch/{job_id}/events") as events:
                async for line in events.aiter_lines():
                    if line.startswith("event: end"):
                        break
            summaries.append((await client.get(f"/v1/batch/{job_id}")).json())
    return summaries


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
"""Debian's Chromium, which the ``/ui`` tests drive with Playwright (None: they skip)."""


@contextlib.contextmanager
def browser_page(playwright: Any, width: int, height: int) -> Iterator[tuple[Any, list[str]]]:
    """A headless Chromium page of ``width`` x ``height`` and the errors it has seen: script
    errors, answers of 400 and over (with their URL), console errors. The browser closes with
    the block."""
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
    )
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": width, "height": height})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on(
            "response",
            lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        yield page, errors
    finally:
        browser.close()
