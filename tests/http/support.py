"""What the HTTP tests share: callers and keys, the app over a live engine, and webhook receivers.

- :func:`open_api` (and :class:`Api`): an app over an engine on a :class:`MemoryStore`, with an
  httpx client talking to it in-process; ``auth``, ``make_keys`` and the keys ``ALICE_KEY`` and
  ``BOB_KEY``.
- :func:`open_service` (and :class:`Service`): the same with webhook deliveries running, and a
  :class:`Receiver` on 127.0.0.1 that records each delivery and signals it; :class:`Outbox`
  signals each delivery outcome the dispatcher records, so a test waits for events, never for
  a time; ``webhook_keys`` gives alice a webhook secret.
- :func:`docs_verifier`: the receiver's verifier exactly as docs/operations.md shows it.
- :class:`Server`: ``trio-batch serve`` in a child process, killed and started again, against
  :func:`open_page_site`; :func:`wait_ended_over_http` follows its jobs to their end.
- :func:`open_stream` (and :class:`Stream`): a streamed answer read through ASGI a chunk at a
  time, and hung up on mid-way.

Fixtures stay in ``conftest.py``; these are the builders they and the test modules use.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import ipaddress
import json
import math
import re
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

import httpx
import trio
from starlette.types import ASGIApp, Message

from tests.support import LocalSite, Reply, WallClock, open_site
from trio_batch import BatchEngine, Config, open_engine
from trio_batch.http import (
    DeliveryPolicy,
    KeyRecord,
    KeyRing,
    create_app,
    hash_key,
    open_deliveries,
)
from trio_batch.metrics import PrometheusMetrics
from trio_batch.stores import MemoryStore, ServiceStore, Store
from trio_batch.testing import ScriptedFetch, asgi_lifespan
from trio_batch.web import precheck

ALICE_KEY = "tb_alice-test-key"
"""Alice's API key (``tests.support.ALICE`` is a :class:`~trio_batch.Caller`)."""
BOB_KEY = "tb_bob-test-key"
"""Bob's API key."""
ALICE, BOB = ALICE_KEY, BOB_KEY
"""The keys' old names, while tests/http/test_client*.py (another helper's) still use them."""


def auth(key: str = ALICE_KEY) -> dict[str, str]:
    """The header that sends ``key`` as the bearer."""
    return {"Authorization": f"Bearer {key}"}


def make_keys() -> KeyRing:
    """Alice (workspace ``lab``, ``fleet``) and bob (``restricted``), neither with a secret."""
    return KeyRing(
        [
            KeyRecord("alice", "lab", "fleet", hash_key(ALICE_KEY)),
            KeyRecord("bob", "", "restricted", hash_key(BOB_KEY)),
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

    async def submit(self, *urls: str, key: str = ALICE_KEY, **extra: Any) -> httpx.Response:
        """POST a batch of ``urls`` (``extra`` goes into each target)."""
        targets = [{"url": u, **extra} for u in urls]
        return await self.client.post("/v1/batch", json={"targets": targets}, headers=auth(key))

    async def get(self, path: str, key: str = ALICE_KEY, **params: Any) -> httpx.Response:
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
        max_workers=base.max_workers,
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
            KeyRecord("alice", "lab", "fleet", hash_key(ALICE_KEY), webhook_secret=SECRET),
            KeyRecord("bob", "", "fleet", hash_key(BOB_KEY)),
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

    async def submit(self, n: int = 2, key: str = ALICE_KEY, **webhook: Any) -> httpx.Response:
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


# -- trio-batch serve in child processes, against a local site -----------------------------------

PAGE_SECONDS = 0.25
"""How long a page of :func:`open_page_site` takes: long enough that a batch outlasts a kill."""


@contextlib.asynccontextmanager
async def open_page_site(numbers: Iterable[int]) -> AsyncIterator[LocalSite]:
    """A local site with a page ``/page/{n}`` for each of ``numbers``: its number in its text,
    ``PAGE_SECONDS`` to answer."""
    async with open_site() as site:
        for n in numbers:
            body = f"<html><body><h1>Page {n}</h1><p>Text of page {n}.</p></body>"
            html = [("content-type", "text/html; charset=utf-8")]
            site.route(f"/page/{n}", Reply(body=body.encode(), headers=html, delay=PAGE_SECONDS))
        yield site


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


# -- a streamed answer, a chunk at a time --------------------------------------------------------
# Driving a streamed answer through ASGI directly, a chunk at a time.
#
# httpx's ASGI transport reads a whole body before it returns, and cannot hang up in the middle;
# this driver does both: it hands the app a request, collects what the app sends, and tells the
# app the client went away when the block is left (or on :meth:`Stream.hang_up`).


class Stream:
    """The answer as it arrives: status, headers, the body so far, and how it ended."""

    def __init__(self, inbox: trio.MemoryReceiveChannel[Message], gone: trio.Event) -> None:
        self._inbox = inbox
        self._gone = gone
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.complete = False
        """The app sent the body's end (``more_body: False``)."""
        self.closed = False
        """The app returned: with ``complete`` False, the body stopped without its end."""

    async def start(self) -> None:
        message = await self._inbox.receive()
        assert message["type"] == "http.response.start", message
        self.status = message["status"]
        self.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}

    async def _next(self) -> bool:
        try:
            message = await self._inbox.receive()
        except trio.EndOfChannel:
            self.closed = True
            return False
        self.body += message.get("body", b"")
        if not message.get("more_body", False):
            self.complete = True
        return True

    async def read_until(self, marker: bytes) -> bytes:
        """Read until the body holds ``marker``; return the body so far."""
        while marker not in self.body:
            if not await self._next():
                raise AssertionError(f"the stream ended before {marker!r}: {self.body!r}")
        return self.body

    async def read_all(self) -> bytes:
        """Read until the app returns."""
        while await self._next():
            pass
        return self.body

    def hang_up(self) -> None:
        self._gone.set()


@contextlib.asynccontextmanager
async def open_stream(
    app: ASGIApp,
    path: str,
    *,
    key: str,
    headers: Mapping[str, str] | None = None,
    **params: object,
) -> AsyncIterator[Stream]:
    """GET ``path`` on ``app``; the block reads the answer, leaving it hangs up."""
    sent = False
    gone = trio.Event()
    outbox, inbox = trio.open_memory_channel[Message](math.inf)
    all_headers = {"authorization": f"Bearer {key}", **(headers or {})}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": urlencode(params).encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("api.test", 80),
        "state": {},
    }

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        outbox.send_nowait(message)

    async def run() -> None:
        with outbox:
            await app(scope, receive, send)

    stream = Stream(inbox, gone)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await stream.start()
        try:
            yield stream
        finally:
            gone.set()
