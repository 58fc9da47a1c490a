"""Lingering close: an answer sent before the request body was read still reaches the client.

When the app answers before it has read the whole body (a 413 for a body over the cap, a 401
for a wrong key), hypercorn closes the connection as soon as the answer is sent. The client may
still be uploading; the kernel then finds unread bytes on a closed socket and resets the
connection, and the reset discards the answer the client had not read yet: it sees "server
disconnected" instead of the 413 (about one run in three, in the security review).

So, like the "lingering close" of Apache and nginx, :class:`LingeringClose` marks such an
answer ``Connection: close``, sends it in full, and then, before letting the connection close,
reads and discards what the client is still sending: at most ``max_bytes``, for at most
``seconds``. A client that stops sending within those bounds reads its answer every time; one
that sends more than the bounds allow may still see a reset, which is all it can expect.
"""

from __future__ import annotations

from typing import Final, final

import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LINGER_BYTES: Final = 16 * 2**20
"""Most bytes of an unread body discarded after an early answer."""
LINGER_SECONDS: Final = 5.0
"""Most seconds spent discarding them."""


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        key = bytes(name).lower()
        if key == b"transfer-encoding" or (key == b"content-length" and bytes(value) != b"0"):
            return True
    return False


@final
class LingeringClose:
    """ASGI wrapper: an answer sent before the request body ended gets ``Connection: close``,
    and the rest of the body is read and discarded (bounded) before the answer is finished."""

    def __init__(
        self, app: ASGIApp, *, max_bytes: int = LINGER_BYTES, seconds: float = LINGER_SECONDS
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        body_ended = False
        early = False

        async def receive_tracked() -> Message:
            nonlocal body_ended
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_ended = True
            return message

        async def send_lingering(message: Message) -> None:
            nonlocal early
            if message["type"] == "http.response.start" and not body_ended:
                early = True
                kept = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*kept, (b"connection", b"close")]}
            elif (
                message["type"] == "http.response.body"
                and early
                and not message.get("more_body", False)
            ):
                # The whole answer goes out now; the server finishes it (and closes) only
                # after the client's body has been drained.
                await send({**message, "more_body": True})
                if not body_ended:
                    await self._drain(receive_tracked)
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app(scope, receive_tracked, send_lingering)

    async def _drain(self, receive: Receive) -> None:
        read = 0
        with trio.move_on_after(self.seconds):
            while read <= self.max_bytes:
                message = await receive()
                if message["type"] != "http.request":
                    return
                read += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
