"""The ``webhook`` field of ``POST /v1/batch`` and of a retry (SPEC §7): shape, URL, secret.

Each refusal is a 400 naming ``webhook``, ``webhook.url`` or ``webhook.events``, with a hint.
"""

from __future__ import annotations

from .._errors import TargetError
from .._model import WEBHOOK_EVENTS, Webhook
from ._errors import ApiError
from ._keys import KeyRecord
from ._parse import PrecheckFunc, check_text, shown

_EXAMPLE = '"webhook": {"url": "https://example.org/hooks", "events": ["end"]}'


def parse_webhook(
    body: object, record: KeyRecord, *, precheck: PrecheckFunc, keys_hint: str = "FILE"
) -> Webhook | None:
    """The ``webhook`` of a submit body (a dict ``parse_batch`` accepted), or None without one.

    Raises:
        ApiError: 400 naming the field at fault.
    """
    if not isinstance(body, dict) or "webhook" not in body:
        return None
    raw = body["webhook"]
    if not isinstance(raw, dict):
        raise ApiError(
            400,
            "webhook must be an object with url and events",
            f"send {_EXAMPLE}",
            field="webhook",
        )
    for name in raw:
        if name not in ("url", "events"):
            raise ApiError(
                400,
                f"webhook.{shown(name)} is not a field; a webhook has url and events",
                "remove the field",
                field=f"webhook.{shown(name)}",
            )
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise ApiError(
            400,
            "webhook.url must be a non-empty string",
            "give the absolute https URL that should receive the job's events",
            field="webhook.url",
        )
    check_text("webhook.url", url)
    events = raw.get("events", ["end"])
    if (
        not isinstance(events, list)
        or not events
        or any(not isinstance(e, str) or e not in WEBHOOK_EVENTS for e in events)
    ):
        raise ApiError(
            400,
            'webhook.events must be a non-empty array of "target" and "end"',
            'send ["end"] for the end of the job, or ["target", "end"] for every target too',
            field="webhook.events",
        )
    try:
        precheck(url)
    except TargetError as exc:
        raise ApiError(400, f"webhook.url: {exc.msg}", exc.hint, field="webhook.url") from None
    if not record.webhook_secret:
        raise ApiError(
            400,
            "this caller has no webhook secret, so its webhooks cannot be signed",
            f"ask the operator to run: trio-batch keys secret {record.name} --keys {keys_hint}",
            field="webhook",
        )
    return Webhook(url, tuple(events))  # Webhook puts the events in their order


def parse_retry_body(body: object, record: KeyRecord, *, precheck: PrecheckFunc) -> Webhook | None:
    """The webhook of a retry's optional body (``{"webhook": {...}}``), or None without one.

    Raises:
        ApiError: 400 naming the field at fault.
    """
    if body is None:
        return None
    if not isinstance(body, dict):
        raise ApiError(
            400,
            "the body of a retry must be a JSON object, or empty",
            f"send no body, or {{{_EXAMPLE}}} for the new job's events",
            field="body",
        )
    for name in body:
        if name != "webhook":
            raise ApiError(
                400,
                f"{shown(name)} is not a field of a retry; a retry takes only webhook",
                "remove the field: the targets are the old job's failed ones",
                field=shown(name),
            )
    return parse_webhook(body, record, precheck=precheck)
