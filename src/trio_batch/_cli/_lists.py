"""The settings whose value is a list: the networks the guard lets through, and the origins whose
browser pages may call the API. Each is read from a list (a flag repeated, a config file's
array) or from one comma-separated string (an environment variable), and checked whole.
"""

from __future__ import annotations

import ipaddress


def _items(raw: object, what: str) -> list[str]:
    """The strings of a list setting, or ``ValueError`` saying what the list should hold."""
    if isinstance(raw, str):
        found: list[object] = [s for s in (p.strip() for p in raw.split(",")) if s]
    elif isinstance(raw, (list, tuple)):
        found = list(raw)
    else:
        raise ValueError(f"must be a list of {what}")
    if not all(isinstance(item, str) for item in found):
        raise ValueError(f"must be a list of {what}")
    return [str(item).strip() for item in found]


def networks(raw: object) -> object:
    """``allow_net``: networks in CIDR form, as a tuple of their normal spellings."""
    nets = []
    for item in _items(raw, "networks in CIDR form, like 127.0.0.0/8"):
        try:
            nets.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ValueError(
                f"{item!r} is not a network in CIDR form (like 127.0.0.0/8 or ::1/128)"
            ) from None
    return tuple(nets)


def origins(raw: object) -> object:
    """``cors_origin``: origins as browsers send them (``scheme://host[:port]``); ``*`` refused."""
    from ..http import check_origins

    return tuple(sorted(check_origins(_items(raw, "origins, like https://dashboard.example.org"))))
