"""``run``'s flags for the common options: one value for every line of the input that does not say.

``--formats markdown,links``, ``--render``, ``--robots`` (``--no-robots``) and ``--header "Name:
value"`` (repeatable) become a JSON object of options, :func:`option_defaults`, that the input's
reader lays under each line's own (:func:`with_defaults`): a URL line takes them all, a JSON
line keeps every option it names, and a header it names wins over the flag's of the same name
(in any case). Bad values are refused as argparse reads them, so a typo is a usage error (exit 2)
naming the flag, before anything is read or fetched.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from .._errors import TargetError
from .._headers import canonical_name, header_refusal
from .._model import JSONValue, Options
from ._output import UsageError

FORMATS_EXAMPLE = "markdown,links,metadata"


def add_option_arguments(parser: argparse.ArgumentParser, *, crawl: bool = False) -> None:
    """``--formats``, ``--render``, ``--robots`` and ``--header``, each for every line that does
    not say; with ``crawl``, for every page of a crawl (which obeys robots.txt unless
    ``--no-robots``)."""
    each = "every page" if crawl else "every line that does not say"
    parser.add_argument(
        "--formats",
        type=formats_list,
        metavar="A,B",
        help=f"the formats of {each}, comma-separated, e.g. "
        f"{FORMATS_EXAMPLE} (the first text-like one is the content: markdown, text, html, "
        "raw; links and metadata go in meta)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        default=None,
        help=f"load {'every page' if crawl else 'every page that does not say'} in a headless "
        "Chromium and shape the DOM its "
        "scripts built (for pages that answer 'Loading...')",
    )
    parser.add_argument(
        "--robots",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="obey each site's robots.txt (a disallowed URL fails without a request; a "
        "Crawl-delay spaces the host) for every line that does not say"
        if not crawl
        else "obey the site's robots.txt (on by default for a crawl: a disallowed page is "
        "skipped without a request, a Crawl-delay spaces the host); --no-robots ignores it",
    )
    parser.add_argument(
        "--header",
        type=header_line,
        action="append",
        default=[],
        metavar='"NAME: VALUE"',
        help="a request header for "
        + ("every page" if crawl else "every line that does not send one of that name")
        + " (repeatable): Accept, Accept-Language, Authorization, Cookie, Referer, User-Agent",
    )


def formats_list(value: str) -> list[str]:
    """A ``--formats`` value: known format names, comma-separated, each at most once."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"name one format or more, e.g. {FORMATS_EXAMPLE}")
    _check(Options(formats=tuple(names)))
    return names


def header_line(value: str) -> tuple[str, str]:
    """A ``--header`` value, ``"Name: value"``: an allowed header with a one-line value."""
    name, colon, text = value.partition(":")
    name, text = name.strip(), text.strip()
    if not colon or not name or not text:
        raise argparse.ArgumentTypeError(
            f"write a header as 'Name: value', e.g. 'Accept-Language: fr' (got {_shown(value)})"
        )
    refusal = header_refusal({name: text})
    if refusal is not None:
        _, message, hint = refusal
        raise argparse.ArgumentTypeError(f"{message}; {hint}")
    return canonical_name(name) or name, text


def option_defaults(args: argparse.Namespace) -> dict[str, JSONValue]:
    """The options the flags give every line that does not say, as a line's JSON holds them.

    Raises:
        UsageError: ``--header`` names one header twice.
    """
    defaults: dict[str, JSONValue] = {}
    if args.formats:
        defaults["formats"] = list(args.formats)
    if args.render:
        defaults["render"] = True
    if args.robots is not None:
        defaults["robots"] = bool(args.robots)
    headers: dict[str, str] = {}
    for name, value in args.header:
        if name in headers:
            raise UsageError(f"--header gives {name} twice (names are case-insensitive); once")
        headers[name] = value
    if headers:
        defaults["headers"] = headers
    return defaults


def with_defaults(
    options: Mapping[str, object], defaults: Mapping[str, JSONValue]
) -> dict[str, object]:
    """A line's ``options`` over the flags' ``defaults``: every option the line names stays as
    it is; its headers are added to the flags', a name it sends (in any case) winning."""
    merged: dict[str, object] = {**defaults, **options}
    given = options.get("headers")
    flagged = defaults.get("headers")
    if isinstance(given, Mapping) and isinstance(flagged, Mapping):
        own = {str(name).lower() for name in given}
        kept = {k: v for k, v in flagged.items() if k.lower() not in own}
        merged["headers"] = {**kept, **given}
    return merged


def _check(options: Options) -> None:
    """Refuse options the web fetcher would refuse, as a usage error with its hint."""
    try:
        from ..web import validate_options
    except ModuleNotFoundError:
        return  # without the web extra, run stops earlier and says what to install
    try:
        validate_options(options)
    except TargetError as exc:
        raise argparse.ArgumentTypeError(f"{exc.msg} ({exc.hint})") from None


def _shown(value: str) -> str:
    """A flag's value as a message quotes it: at most 40 characters."""
    return repr(value if len(value) <= 40 else value[:40] + "...")
