"""The Chrome DevTools Protocol over a pipe, in Trio: commands, answers and each session's events.

Chromium started with ``--remote-debugging-pipe`` reads commands on its fd 3 and writes answers
and events on its fd 4, each a JSON object ended by a NUL byte. :class:`CdpConnection` is the
service's end: :meth:`~CdpConnection.call` sends a command and waits for its answer, and the
events of a session (one page) go to that session's bounded channel. The browser is untrusted
work, so every message it writes is bounded (``max_message_bytes``) and a broken pipe or a
malformed message ends the connection with :class:`CdpClosed` for every waiter.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, final

import trio

Message = dict[str, object]

EVENTS_BUFFER: Final = 4096
"""Events a session may have waiting to be read; a page past it is ended (it is not reading
them: the consumer handles each event in microseconds, so only a runaway page gets there)."""


@final
class CdpClosed(Exception):
    """The browser's end of the pipe closed, or it wrote something the client does not accept."""


@final
class CdpError(Exception):
    """A command the browser answered with an error (``message`` is the browser's text)."""


@final
class CdpConnection:
    """The client end of a DevTools pipe. Obtain one from :func:`open_cdp`."""

    def __init__(self, send: trio.abc.SendStream, max_message_bytes: int) -> None:
        self._send = send
        self._send_lock = trio.Lock()
        self._max = max_message_bytes
        self._next_id = 0
        self._waiting: dict[int, tuple[trio.Event, list[Message]]] = {}
        self._sessions: dict[str, trio.MemorySendChannel[Message]] = {}
        self._closed: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def call(
        self, method: str, params: Message | None = None, *, session: str | None = None
    ) -> Message:
        """Send one command and return its ``result``.

        Raises:
            CdpError: the browser answered with an error.
            CdpClosed: the connection ended before the answer came.
        """
        if self._closed is not None:
            raise CdpClosed(self._closed)
        self._next_id += 1
        ident = self._next_id
        message: Message = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        done = trio.Event()
        box: list[Message] = []
        self._waiting[ident] = (done, box)
        try:
            async with self._send_lock:
                try:
                    await self._send.send_all(json.dumps(message).encode() + b"\0")
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self._close("the browser's pipe closed")
                    raise CdpClosed("the browser's pipe closed") from exc
            await done.wait()
        finally:
            self._waiting.pop(ident, None)
        if not box:
            raise CdpClosed(self._closed or "closed")
        answer = box[0]
        error = answer.get("error")
        if error is not None:
            text = error.get("message") if isinstance(error, dict) else None
            raise CdpError(str(text or "the browser refused the command"))
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    def abandon(self, why: str) -> None:
        """Treat the connection as ended (a browser that stopped answering): every waiter and
        every later call gets :class:`CdpClosed`."""
        self._close(why)

    def events(self, session: str) -> trio.MemoryReceiveChannel[Message]:
        """A channel of ``session``'s events (``{"method", "params"}``), closed with the
        connection or by :meth:`forget`."""
        send, receive = trio.open_memory_channel[Message](EVENTS_BUFFER)
        self._sessions[session] = send
        return receive

    def share(self, session: str, with_session: str) -> None:
        """Route ``session``'s events to ``with_session``'s channel too (a page's frames and
        workers, whose events its reader handles); :meth:`forget` stops it."""
        channel = self._sessions.get(with_session)
        if channel is not None:
            self._sessions[session] = channel.clone()

    def forget(self, session: str) -> None:
        """Stop routing ``session``'s events (its channel ends)."""
        channel = self._sessions.pop(session, None)
        if channel is not None:
            channel.close()

    async def read_forever(self, receive: trio.abc.ReceiveStream) -> None:
        """Read and route every message until the pipe closes; then fail every waiter."""
        buffer = bytearray()
        try:
            while chunk := await receive.receive_some(256 * 1024):
                searched = len(buffer)  # a message's end is looked for in new bytes only
                buffer += chunk
                while (end := buffer.find(b"\0", searched)) >= 0:
                    self._dispatch(bytes(buffer[:end]))
                    del buffer[: end + 1]
                    searched = 0
                if len(buffer) > self._max:
                    raise CdpClosed("the browser sent a message over the size limit")
            self._close("the browser's pipe closed")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._close("the browser's pipe closed")
        except CdpClosed as exc:
            self._close(str(exc))

    def _dispatch(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            raise CdpClosed("the browser sent a message that is not JSON") from None
        if not isinstance(message, dict):
            raise CdpClosed("the browser sent a message that is not an object")
        ident = message.get("id")
        if isinstance(ident, int):
            waiting = self._waiting.get(ident)
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        session = message.get("sessionId")
        channel = self._sessions.get(session) if isinstance(session, str) else None
        if channel is None:
            return
        try:
            channel.send_nowait(message)
        except trio.WouldBlock:
            self._sessions.pop(str(session), None)
            channel.close()  # the page's reader sees its channel end: the render fails
        except trio.BrokenResourceError:
            self._sessions.pop(str(session), None)

    def _close(self, why: str) -> None:
        if self._closed is None:
            self._closed = why
        for done, _ in list(self._waiting.values()):
            done.set()
        for channel in self._sessions.values():
            channel.close()
        self._sessions.clear()


@asynccontextmanager
async def open_cdp(
    send: trio.abc.SendStream,
    receive: trio.abc.ReceiveStream,
    *,
    max_message_bytes: int,
    task_status_closed: trio.Event | None = None,
) -> AsyncIterator[CdpConnection]:
    """A :class:`CdpConnection` over the two ends of a pipe, reading in the background for the
    block's life. ``task_status_closed`` (if given) is set when the browser's end closes."""
    if not max_message_bytes > 0 or math.isinf(max_message_bytes):
        raise ValueError(f"max_message_bytes must be > 0 (got {max_message_bytes!r})")
    connection = CdpConnection(send, max_message_bytes)

    async def read() -> None:
        try:
            await connection.read_forever(receive)
        finally:
            if task_status_closed is not None:
                task_status_closed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        try:
            yield connection
        finally:
            connection._close("the client closed the connection")
            nursery.cancel_scope.cancel("the DevTools connection closed")
