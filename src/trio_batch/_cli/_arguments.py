"""The arguments several commands share, and the types that check them as argparse reads them.

An argument type raises :class:`argparse.ArgumentTypeError`, so a bad value is a usage error
(exit 2) whose message argparse prefixes with the flag.
"""

from __future__ import annotations

import argparse
import ipaddress

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_DB = "trio-batch.sqlite"
DEFAULT_SERVER = "http://127.0.0.1:8080"


def add_db_argument(parser: argparse.ArgumentParser, *, readonly: bool = True) -> None:
    """``--db PATH``: the SQLite store, read read-only unless the command writes it (``run``)."""
    how = "to read, read-only " if readonly else ""
    parser.add_argument(
        "--db",
        default=DEFAULT_DB,
        metavar="PATH",
        help=f"the SQLite store {how}(default ./{DEFAULT_DB})",
    )


def add_allow_net_argument(parser: argparse.ArgumentParser) -> None:
    """``--allow-net CIDR`` (repeatable): what ``run`` and ``retry`` let the fetcher reach."""
    parser.add_argument(
        "--allow-net",
        type=cidr,
        action="append",
        default=[],
        metavar="CIDR",
        help="let the fetcher reach this private network (repeatable), e.g. 127.0.0.0/8",
    )


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--progress``: how ``run`` and ``demo`` show progress on stderr."""
    parser.add_argument(
        "--progress",
        choices=["auto", "rich", "plain", "off"],
        default="auto",
        help="progress on stderr: a live display on a terminal (auto), plain lines, or none",
    )


def cidr(value: str) -> IPNetwork:
    """An ``--allow-net`` value: a network such as ``127.0.0.0/8`` or ``10.1.2.3``.

    A bare IPv4 address that ends in ``.0`` (``127.0.0.0``) reads as one address, which is
    almost never what was meant: it is refused, naming the prefix to write.
    """
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a network; write it as CIDR, e.g. 127.0.0.0/8 or 10.0.0.5/32"
        ) from None
    address = value.strip()
    if "/" not in address and network.version == 4 and address.endswith(".0"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is one address ({network}); write a network with its prefix, e.g. "
            f"{address}/24 (or 127.0.0.0/8 for this machine)"
        )
    return network


def positive_int(value: str) -> int:
    """A count such as ``--jobs``: a whole number above 0."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0 (got {value!r})")
    return number
