"""Shaping outside the event loop and the GIL: worker processes with CPU and memory limits.

A target's options run code the caller wrote (a jq program, a grep pattern) on a body a site
wrote, through parsers whose worst case is superlinear (HTML5 tree building takes 2.3 s on
50,000 nested ``<div>``; pypdf and jq allocate without bound). So :meth:`Shaper.run` sends
such work to a ``trio-parallel`` worker process that

- has an address-space limit (``RLIMIT_AS``, ``memory`` bytes) and no core dumps, so a memory
  bomb ends the worker, never the service;
- gets ``cpu_seconds`` of CPU time per job (a CPU-time timer, ``ITIMER_PROF``, set afresh
  before each job: its SIGPROF ends the worker even inside C code; ``RLIMIT_CPU`` one second
  later is the kernel's backstop), and twice that plus 5 s of wall time, after which the job is
  cancelled and ``kill_on_cancel`` kills the worker;
- runs at a lower priority (nice 10), so on a busy machine the event loop gets the CPU first;
- writes nothing to the service's stdout or stderr (jq prints its errors there).

Workers are forked from a ``multiprocessing`` fork server that has imported ``_worker`` (the
shaping code, jq, regex, lexbor; no Trio) once: a worker then starts in milliseconds with
nothing of the service's memory, where a spawned one paid a Python start and those imports
(about 0.15 s of CPU each, 0.3 s for the two workers of every ``trio-batch run``). A dead
worker is replaced by the next job. Only work that is cheap and bounded whatever the bytes say
stays in the service, in a thread: decoding text, JSON without ``jq``, HTML source
(``mode=html``/``raw``, ``formats=["raw"]``), and ``question`` on at most 64 KiB. Why
trio-parallel, and the numbers behind these choices, are in ``docs/web.md``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar, final

import trio
import trio_parallel  # type: ignore[import-untyped,import-not-found,unused-ignore]

from ..._errors import TargetError
from ..._model import Options
from .._guard._limits import FairPool
from ._preload import preload_shaping
from ._shape import Body, kind_of, shape_body
from ._worker import Broke, Failed, Shaped, job, ready, worker_init, worker_retire

logger = logging.getLogger("trio_batch.web")
T = TypeVar("T")

IN_PROCESS_BYTES: Final = 64 * 1024
"""Largest body ``question`` scores in the service's own thread (BM25 is linear: ~5 ms)."""
ON_LOOP_BYTES: Final = 64 * 1024
"""Largest body shaped on the event loop itself when shaping is only decoding it (no
``question``): 4 us at 16 KiB, where a thread's round trip costs 90 us of CPU on a 2-core
machine (bench.fleet, instant pages)."""
MIN_MEMORY: Final = 256 * 2**20
"""Smallest address-space limit a worker starts with (Python, jq and regex take ~50 MiB)."""
_IDLE_SECONDS: Final = 600.0
_WARM_CALLER: Final = "\x00warm-up"
"""The pool's name for the warm-up jobs (no caller's name has a NUL)."""
_GRACE_SECONDS: Final = 5.0
_LIMIT_HINT: Final = (
    "ask for less: a smaller page (a section, or an API), fewer PDF pages (pages=1-5), "
    "a jq program that keeps fewer values (limit(100; ...)), or a simpler grep pattern"
)


def in_process(body: Body, options: Options) -> bool:
    """Whether shaping ``body`` is cheap and bounded whatever its bytes, so it may run in a
    thread of the service: no user code (``grep``, ``jq``), no parser with a superlinear worst
    case (HTML to text or Markdown, PDF), and ``question`` only on a body of at most
    ``IN_PROCESS_BYTES``.
    """
    if options.grep or options.jq:
        return False
    try:
        kind = kind_of(body)
    except TargetError:
        return True  # refused at once (415)
    if kind == "pdf" or (kind == "html" and _parses_html(options)):
        return False
    return not options.question or len(body.data) <= IN_PROCESS_BYTES


def _parses_html(options: Options) -> bool:
    """Whether the options parse an HTML body: text or Markdown, or any format but ``raw``
    (cleaned HTML, links, metadata)."""
    if options.formats:
        return any(name != "raw" for name in options.formats)
    return options.mode in ("", "text", "markdown")


def warms_up(options: Options) -> bool:
    """Whether a fetch with these options may need a shaping worker, whatever its body is
    (HTML to text or Markdown, the formats that parse it, ``grep``, ``jq``, PDF pages), so
    that the workers should start beside its download."""
    return bool(options.grep or options.jq or options.pages) or _parses_html(options)


@dataclass(frozen=True, slots=True)
class ShapeLimits:
    """What one shaping job may use, and how many run at once."""

    workers: int
    """Worker processes, so at most this many jobs at once. A caller alone may use them all;
    while other callers wait, each worker that comes free goes to the waiting caller that
    holds fewest (``_limits.FairPool``), so a caller waits for one job at most."""
    cpu_seconds: float
    """CPU time per job."""
    memory: int
    """Address space per worker process, in bytes."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"WebFetcher shape_workers must be >= 1 (got {self.workers!r})")
        if not self.cpu_seconds > 0:
            raise ValueError(f"WebFetcher shape_cpu_seconds must be > 0 (got {self.cpu_seconds!r})")
        if self.memory < MIN_MEMORY:
            raise ValueError(
                f"WebFetcher shape_memory must be at least {MIN_MEMORY} bytes (256 MiB; "
                f"got {self.memory!r})"
            )

    @property
    def wall_seconds(self) -> float:
        """Wall time per job: twice the CPU time (the worker may wait for a core), plus 5 s
        (a worker that has to start first)."""
        return 2 * self.cpu_seconds + 5

    def over_time(self) -> TargetError:
        """The error for a job stopped for time (status 422)."""
        return TargetError(
            f"shaping this response took more than {self.cpu_seconds:g} s of CPU time "
            "(the limit per target)",
            hint=_LIMIT_HINT,
            status=422,
        )

    def over_memory(self) -> TargetError:
        """The error for a job stopped for memory (status 422)."""
        return TargetError(
            f"shaping this response needed more than {_memory_text(self.memory)} of memory "
            "(the limit per target)",
            hint=_LIMIT_HINT,
            status=422,
        )


def _memory_text(n: int) -> str:
    """``n`` bytes as an operator writes them: ``1 GiB``, ``512 MiB``."""
    if n % 2**30 == 0:
        return f"{n // 2**30} GiB"
    return f"{n / 2**20:.0f} MiB"


# -- in the service -----------------------------------------------------------------------------


class WorkerContext(Protocol):
    """What is used of ``trio_parallel.WorkerContext`` (trio-parallel ships no types)."""

    async def run_sync(
        self,
        sync_fn: Callable[..., T],
        *args: object,
        kill_on_cancel: bool,
        limiter: trio.CapacityLimiter,
    ) -> T:
        """``sync_fn(*args)`` in a worker process."""
        ...


def _exit_codes(*names: str) -> frozenset[int]:
    """The exit codes of a process ended by these signals (those this platform has)."""
    return frozenset(-int(getattr(signal, name)) for name in names if hasattr(signal, name))


_TIME_SIGNALS: Final = _exit_codes("SIGPROF", "SIGXCPU", "SIGKILL")
_MEMORY_SIGNALS: Final = _exit_codes("SIGABRT", "SIGSEGV", "SIGBUS")


@final
class Shaper:
    """Shapes bodies: cheap ones in a thread, the rest in limited worker processes.

    Made by :func:`open_shaper`, which owns the workers.
    """

    def __init__(self, context: WorkerContext, limits: ShapeLimits) -> None:
        self._context = context
        self._limits = limits
        self._threads = trio.CapacityLimiter(2)  # in-process work is short: 2 at a time
        self._workers = FairPool(limits.workers)
        self._unlimited = trio.CapacityLimiter(math.inf)  # the slot is taken before the clock

    async def run(self, caller: str, body: Body, options: Options) -> tuple[str, dict[str, object]]:
        """The content ``options`` ask for from ``body``, and what they add to ``meta``.

        Raises:
            TargetError: what :func:`~trio_batch.web._extract._shape.shape_body` raises, or the job
                went over its CPU time, wall time or memory (status 422); the worker was killed
                and will be replaced.
            RuntimeError: a worker died for another reason, or shaping hit a bug (logged with
                the exception type only).

        Cancellation: work in a thread is not abandoned (it is short: see
        :func:`in_process`); a job in a worker process is killed at once. A small body that
        needs only decoding (``ON_LOOP_BYTES``) is shaped here, after a checkpoint.
        """
        if in_process(body, options):
            if not options.question and len(body.data) <= ON_LOOP_BYTES:
                await trio.lowlevel.checkpoint()
                return shape_body(body, options)
            return await trio.to_thread.run_sync(
                functools.partial(shape_body, body, options), limiter=self._threads
            )

        async with self._workers.slot(caller):
            outcome = await self._in_worker(body, options)

        if isinstance(outcome, Shaped):
            return outcome.content, outcome.meta
        if isinstance(outcome, Failed):
            raise TargetError(outcome.msg, hint=outcome.hint, status=outcome.status)
        if outcome.what == "memory":
            logger.info("a shaping job went over its memory limit")
            raise self._limits.over_memory()
        logger.error("shaping failed with %s", outcome.what, extra={"error_type": outcome.what})
        raise RuntimeError(f"shaping failed with {outcome.what}")

    async def warm(self) -> None:
        """Start one worker process now, holding one job slot, so the first job finds it
        running: the first worker of a process takes 0.2-2 s to start (the fork server's
        Python interpreter and the shaping imports), which a short run would otherwise wait
        for after its first download. The others, forked from that server in milliseconds,
        start when jobs first need them.

        A job that comes meanwhile waits for the worker to be ready, or takes another slot.

        Cancellation: a worker still starting is killed (trio-parallel's ``kill_on_cancel``).
        """
        async with self._workers.slot(_WARM_CALLER):
            try:
                await self._context.run_sync(ready, kill_on_cancel=True, limiter=self._unlimited)
            except Exception as exc:  # best effort: the next job starts a worker as before
                logger.warning("a shaping worker did not start (%s)", type(exc).__name__)

    async def _in_worker(self, body: Body, options: Options) -> Shaped | Failed | Broke:
        limits = self._limits
        with trio.move_on_after(limits.wall_seconds):
            try:
                outcome = await self._context.run_sync(
                    job,
                    body,
                    options,
                    limits.cpu_seconds,
                    kill_on_cancel=True,
                    limiter=self._unlimited,
                )
            except trio_parallel.BrokenWorkerError as exc:
                raise self._broken(exc) from None
            except MemoryError:  # the result was too big to pickle within the worker's limit
                logger.info("a shaping job's result went over its memory limit")
                raise limits.over_memory() from None
            return outcome
        logger.info("a shaping job went over its wall time; its worker was killed")
        raise limits.over_time()

    def _broken(self, exc: BaseException) -> Exception:
        process = exc.args[-1] if exc.args else None
        code = getattr(process, "exitcode", None)
        if code in _TIME_SIGNALS:
            logger.info("a shaping job went over its CPU time; its worker was killed")
            return self._limits.over_time()
        if code in _MEMORY_SIGNALS:
            logger.info("a shaping job ran out of memory; its worker ended")
            return self._limits.over_memory()
        logger.warning(
            "a shaping worker ended with exit code %s; if this repeats, check the memory "
            "limit (shape_memory)",
            code,
        )
        return RuntimeError(f"a shaping worker ended with exit code {code}")


@contextlib.asynccontextmanager
async def open_shaper(limits: ShapeLimits) -> AsyncIterator[Shaper]:
    """A :class:`Shaper` whose worker processes live as long as the block.

    No worker starts until a job, or :meth:`Shaper.warm`, needs one. Leaving the block waits
    for jobs still running in workers (each within its wall time), then ends the idle
    workers; one that does not end within 5 s is killed and logged, never raised.
    """
    preload_shaping()
    try:
        async with trio_parallel.open_worker_context(
            init=functools.partial(worker_init, limits.memory),
            retire=worker_retire,
            idle_timeout=_IDLE_SECONDS,
            grace_period=_GRACE_SECONDS,
            worker_type=trio_parallel.WorkerType.FORKSERVER,
        ) as context:
            yield Shaper(context, limits)
    except trio_parallel.BrokenWorkerError as exc:
        logger.warning("a shaping worker did not end cleanly (%s)", type(exc).__name__)
