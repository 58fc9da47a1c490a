"""W2 with socket I/O instead of timers: is W2's loss the timers' or the machine's?

W2 models a fetch as ``trio.sleep(0.02)``, and CPython's epoll rounds a timeout up to the
millisecond (``python -m bench.timer_overshoot``). A real fetch wakes the loop when its socket
becomes readable, with no rounding. This runs W2's drain (400 targets in jobs of 20, 2 workers)
with a fetch that sends a UDP datagram to a latency server in another process and waits for
its reply, which the server sends 20 ms later (``select`` with microsecond timeouts)::

    python -m bench.socket_latency [--pg DSN] [--repeats 3]

For each system it prints the efficiency (ideal / wall, as W2) and, from the kernel's receive
timestamp of each reply (``SO_TIMESTAMPNS``, Linux), how late the reply left the server and how
long the loop took to pick it up once it had arrived.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import trio

from trio_batch import Caller, Result, Target

from ._harness import PG_ENV, RESULT
from .workloads import engine_drain, floor_drain

DELAY = 0.02
TARGETS = 400
WORKERS = 2
_SO_TIMESTAMPNS = 35  # Linux; the socket module does not name it


def serve(delay: float) -> None:
    """The latency server: answer each datagram ``delay`` seconds after it arrived."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    due: list[tuple[float, bytes, tuple[str, int]]] = []
    while True:
        while due and due[0][0] <= time.monotonic():
            _, data, addr = heapq.heappop(due)
            sock.sendto(data, addr)
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
        if select.select([sock], [], [], timeout)[0]:
            data, addr = sock.recvfrom(64)
            heapq.heappush(due, (time.monotonic() + delay, data, addr))


class Lateness:
    """Per reply: how late it left the server, and how long the loop took to take it (ms)."""

    def __init__(self) -> None:
        self.server: list[float] = []
        self.loop: list[float] = []

    def fetch(self, port: int) -> Callable[[Caller, Target], Awaitable[Result]]:
        async def fetch(caller: Caller, target: Target) -> Result:
            with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                sent = time.time()
                await sock.sendto(b"x", ("127.0.0.1", port))
                _, ancillary, _, _ = await sock.recvmsg(64, 1024)
                taken = time.time()
            seconds, nanoseconds = struct.unpack("qq", ancillary[0][2][:16])
            arrived = seconds + nanoseconds * 1e-9
            self.server.append((arrived - sent - DELAY) * 1e3)
            self.loop.append((taken - arrived) * 1e3)
            return RESULT

        return fetch


def measure(system: str, port: int, workdir: str, pg_dsn: str) -> tuple[float, Lateness]:
    """One drain of ``system`` (``floor`` or a store kind): efficiency and lateness."""
    late = Lateness()
    if system == "floor":
        seconds = trio.run(floor_drain, TARGETS, late.fetch(port), WORKERS)
    else:
        drain = functools.partial(
            engine_drain,
            system,
            workdir,
            pg_dsn,
            n_targets=TARGETS,
            job_size=20,
            fetch=late.fetch(port),
            workers=WORKERS,
        )
        seconds = trio.run(drain).seconds
    return TARGETS * DELAY / WORKERS / seconds, late


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=os.environ.get(PG_ENV, ""), help="PostgreSQL DSN")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    systems = ["floor", "memory", "sqlite"] + (["postgres"] if args.pg else [])
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.socket_latency", "--serve", str(DELAY)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        runs: dict[str, list[tuple[float, Lateness]]] = {s: [] for s in systems}
        with tempfile.TemporaryDirectory() as workdir:
            for _ in range(args.repeats):  # alternating, so a neighbour's load falls on all
                for system in systems:
                    runs[system].append(measure(system, port, workdir, args.pg))
    finally:
        server.kill()
        server.wait()
    print(f"{'system':<9} {'efficiency':>10} {'server late':>12} {'loop takes':>11}")
    for system, results in runs.items():
        server_ms = statistics.mean(x for _, late in results for x in late.server)
        loop_ms = statistics.mean(x for _, late in results for x in late.loop)
        efficiency = statistics.median(e for e, _ in results)
        print(f"{system:<9} {efficiency:>10.3f} {server_ms:>9.2f} ms {loop_ms:>8.2f} ms")


if __name__ == "__main__":
    main()
