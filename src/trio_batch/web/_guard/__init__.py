"""The guard: what every request of the web fetcher stands on, whoever makes it.

The floor of ``trio_batch.web``: it imports nothing of the other three rooms, and all three use
it. ``_check`` decides which URLs and addresses may be reached (``precheck`` at submit,
``check_url`` and ``resolve_checked`` on every hop); ``_net`` sends a connection to the address
that was checked, never to a second DNS answer; ``_outbound`` is the same guard as an httpx
transport for the service's own requests (webhooks); ``_errors`` turns transport failures and
statuses into :class:`~trio_batch.TargetError` with hints that never name the host; ``_limits``
holds ``FairPool``, the fair share of fetch slots and shaping workers among callers.
"""
