"""What a command says and how it ends: exit codes, usage errors, JSON lines, and hints.

Messages speak the words of the command line (``--db``, ``--allow-net``), never those of the
Python API, and each names what to do.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from urllib.parse import urlsplit

from .._headers import NOT_HELD
from .._model import JSONValue, TargetStatus, target_json

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A problem with the command line, its input or its files; exit 2 with this message."""


def missing_extra(command: str, exc: ModuleNotFoundError, extra: str) -> str:
    """The one line for ``command`` when a module of ``extra`` is not installed.

    Raises:
        ModuleNotFoundError: ``exc`` again when the missing module is trio-batch's own: that
            is a broken install or a bug, not an extra to install.
    """
    if not exc.name or exc.name.startswith("trio_batch."):
        raise exc
    package = exc.name.partition(".")[0]
    return f"trio-batch {command} needs {package}: pip install 'trio-batch[{extra}]'"


def target_line(idx: int, target: TargetStatus) -> dict[str, JSONValue]:
    """One target's JSON line for ``run`` and ``results``; ``idx`` is its place in the input."""
    return {**target_json(target), "idx": idx}


def dump_line(data: Mapping[str, JSONValue]) -> str:
    """``data`` as one compact JSON line, non-ASCII text as it is."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"


_NON_PUBLIC = "non-public address"
_WHOLE_NETWORK = "10.0.0.0/8"  # the example of a private network in every hint


def _refused_network(url: str, error: str) -> tuple[str, str | None] | None:
    """For a refused private address: where it is and the ``--allow-net`` value naming it.

    None when ``error`` is not that refusal. Else ``("loopback", net)`` for this machine,
    ``("address", net)`` for another literal address, or ``("network", None)`` when the
    address is not in the URL (a host name, or a redirect's target).
    """
    if _NON_PUBLIC not in error:
        return None

    host = (urlsplit(url).hostname or "").strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None

    if host == "localhost" or (address is not None and address.is_loopback):
        return "loopback", "127.0.0.0/8" if address is None or address.version == 4 else "::1/128"
    if address is not None and "redirect" not in error:
        return "address", f"{address}/{address.max_prefixlen}"
    return "network", None


def allow_net_hint(url: str, error: str, hint: str) -> str:
    """``hint``, or for a refused private address the ``--allow-net`` flag that would allow it.

    The web fetcher's hints speak to the Python API (``WebFetcher(allow=...)``); on the command
    line the remedy is a flag, and for a literal address we can name its network.
    """
    refused = _refused_network(url, error)
    if refused is None:
        return hint

    where, net = refused
    if where == "loopback":
        return (
            f"the address is on this machine; to fetch from it, pass --allow-net {net} "
            "(only for sites you trust)"
        )
    if where == "address":
        return (
            f"only public addresses are fetched; to reach this one, pass --allow-net {net} "
            f"(or its whole network, e.g. --allow-net {_WHOLE_NETWORK})"
        )
    return (
        "only public addresses are fetched; to reach a private network you trust, pass "
        f"--allow-net with its CIDR, e.g. --allow-net {_WHOLE_NETWORK}"
    )


CREDENTIAL_HINT = (
    "run and retry keep a target's Cookie and Authorization in their own memory, never in "
    "--db, so a later command cannot send them again: run the target again with its header, "
    "in its JSON line's options.headers or with --header 'Authorization: ...'"
)


def cli_hint(url: str, error: str, hint: str) -> str:
    """``hint`` as the command line says it: for a refused private address the ``--allow-net``
    flag (:func:`allow_net_hint`); for a credential this process never held (every command is
    a process of its own, so ``retry`` of a target with ``Authorization``), what to run. The
    fetcher's hint for that one speaks to a server's operator."""
    if NOT_HELD in error:
        return CREDENTIAL_HINT
    return allow_net_hint(url, error, hint)


def operator_hint(url: str, error: str, hint: str) -> str:
    """``hint``, or for a private address ``serve`` refused, the flag its operator would pass.

    A caller of ``trio-batch serve`` reads it, and may be the operator too (a server on their
    own machine): so it says what a caller can do and names the operator's ``--allow-net``,
    with the network it would take.
    """
    refused = _refused_network(url, error)
    if refused is None:
        return hint

    where, net = refused
    start = "only public addresses are fetched"
    if where == "loopback":
        return (
            f"{start}, and this one is on the server's own machine; the server's operator can "
            f"allow it with trio-batch serve --allow-net {net} (only for sites they trust)"
        )
    if where == "address":
        return (
            f"{start}; use the site's public host name, or the server's operator can allow "
            f"this address with trio-batch serve --allow-net {net} (or its whole network, "
            f"e.g. --allow-net {_WHOLE_NETWORK})"
        )
    return (
        f"{start}; use the site's public host name, or the server's operator can allow its "
        f"private network with trio-batch serve --allow-net CIDR, e.g. --allow-net "
        f"{_WHOLE_NETWORK}"
    )
