"""``trio-batch map URL``: a site's URLs, one a line, ready for ``trio-batch run -``.

Locally, through the web fetcher (its guard, pool and host budget; ``--allow-net`` as for
``run``), or with ``--server`` through ``POST /v1/map``. The URLs go to stdout, one a line; what
cut the map short goes to stderr, one ``note:`` line each. Exit codes: 0 with URLs, 1 when
none were found or the site failed, 2 a usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping

import trio

from .._budget import HostBudget
from .._errors import RetryLater, TargetError
from .._model import Caller
from ._arguments import DEFAULT_SERVER, add_allow_net_argument
from ._output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError, allow_net_hint
from ._remote import RemoteProblem, add_server_arguments, client_error_type, explain, remote_client

CALLER = Caller("cli")
MAX_LIMIT = 10_000


def _limit(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_LIMIT:,} (got {value!r})"
        )
    return number


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "map",
        help="list a site's URLs (sitemaps, start page links), one a line",
        description=(
            "List a site's URLs from its sitemaps (those robots.txt names, else /sitemap.xml; "
            "index files and gzip) and its start page's links, one a line: the start page, "
            "the sitemaps' URLs, then the links, deduplicated, on the start page's host. "
            "Pipe them into 'trio-batch run -'."
        ),
        epilog="Exit status: 0 URLs printed, 1 none found or the site failed, 2 usage error.",
    )
    parser.add_argument("url", metavar="URL", help="the site's start page")
    parser.add_argument(
        "--limit", type=_limit, default=1000, metavar="N", help="most URLs (1000; at most 10000)"
    )
    parser.add_argument(
        "--all-hosts",
        action="store_true",
        help="keep URLs on every host the sitemaps and links name, not only the start page's",
    )
    add_allow_net_argument(parser)
    add_server_arguments(parser, DEFAULT_SERVER, instead="fetching here (POST /v1/map)")
    parser.set_defaults(func=main)


async def _map_local(args: argparse.Namespace) -> Mapping[str, object]:
    try:
        web = importlib.import_module("trio_batch.web")
    except ModuleNotFoundError as exc:
        raise UsageError(f"map needs {exc.name}: pip install 'trio-batch[web]'") from None
    site_map = web.site_map
    async with web.WebFetcher(allow=list(args.allow_net), budget=HostBudget()) as fetch:
        try:
            found = await site_map(
                fetch, CALLER, args.url, limit=args.limit, same_host=not args.all_hosts
            )
        except TargetError as exc:
            hint = allow_net_hint(args.url, exc.msg, exc.hint)
            raise RemoteProblem(f"{exc.msg} ({hint})" if hint else exc.msg, EXIT_FAILED) from None
        except RetryLater as exc:
            raise RemoteProblem(
                f"{exc}: the site or the fetch pool is busy; try again", 1
            ) from None
    answer: dict[str, object] = found.to_json()
    return answer


async def _map_remote(args: argparse.Namespace) -> Mapping[str, object]:
    ClientError = client_error_type()
    try:
        async with remote_client(args) as client:
            found = await client.map(args.url, limit=args.limit, same_host=not args.all_hosts)
    except ClientError as exc:
        raise explain(exc, args.server) from None
    return dict(found)


def main(args: argparse.Namespace) -> int:
    """The ``map`` subcommand."""
    try:
        answer = trio.run(_map_remote if args.server else _map_local, args)
    except RemoteProblem as exc:
        sys.stderr.write(f"trio-batch map: {exc}\n")
        return exc.code
    except UsageError as exc:
        sys.stderr.write(f"trio-batch map: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("trio-batch map: interrupted\n")
        return EXIT_INTERRUPTED
    urls = answer.get("urls")
    notes = answer.get("notes")
    for note in notes if isinstance(notes, list) else []:
        sys.stderr.write(f"trio-batch map: note: {note}\n")
    lines = [str(u) for u in urls] if isinstance(urls, list) else []
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()
    return EXIT_OK if lines else EXIT_FAILED
