"""Signing webhook deliveries as Standard Webhooks do (https://www.standardwebhooks.com).

A delivery is a ``POST`` whose headers carry ``webhook-id`` (unique per message, the same on
every retry of it), ``webhook-timestamp`` (unix seconds of this attempt) and
``webhook-signature``: ``v1,`` + base64 of HMAC-SHA256 over ``id.timestamp.body`` with the
caller's secret (the bytes its ``whsec_`` string encodes). A receiver recomputes it and compares
in constant time; checking the timestamp against its own clock bounds replays.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from ._keys import webhook_key


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one attempt: ``v1,<base64 HMAC-SHA256>``.

    Raises:
        KeysFileError: ``secret`` is not a ``whsec_`` secret.
    """
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(webhook_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one delivery attempt of ``body``, signed with ``secret``."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
    }
