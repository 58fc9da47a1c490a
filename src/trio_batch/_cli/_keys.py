"""``trio-batch keys``: manage the API keys file (add, list, remove, secret).

The keys file is the HTTP API's (``trio_batch.http``), which needs the server extra; it is
imported when the command runs, so ``trio-batch --help`` works without that extra and
``keys`` says what to install.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .._model import CALLER_CLASSES
from .._util import plural
from ._output import missing_extra

DEFAULT_KEYS = "./trio-batch-keys.toml"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "keys",
        help="manage the API keys of `trio-batch serve`",
        description="The keys file holds each caller's name, workspace, class and the SHA-256 "
        "of its key; never the key itself. A running server reads it at start-up.",
    )
    sub = parser.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    add = sub.add_parser(
        "add",
        help="add a caller with a new key; the key is printed once, on the last line",
        description="Add a caller with a new random key. The key is printed once, on the last "
        "line of the output; only its SHA-256 is stored, so keep the key now.",
    )
    add.add_argument("name", help="the caller's name (letters, digits, . _ @ -)")
    add.add_argument("--workspace", default="", help="the caller's workspace (default: none)")
    add.add_argument(
        "--class",
        dest="caller_class",
        choices=CALLER_CLASSES,
        default="fleet",
        help="fleet callers share the fetcher's response cache; restricted callers each get "
        "their own (default fleet)",
    )
    _keys_flag(add)
    add.set_defaults(func=main, action=_add)

    ls = sub.add_parser("list", help="list the callers (names, workspaces, classes)")
    _keys_flag(ls)
    ls.set_defaults(func=main, action=_list)

    rm = sub.add_parser("remove", help="remove a caller; its key stops working at restart")
    rm.add_argument("name")
    _keys_flag(rm)
    rm.set_defaults(func=main, action=_remove)

    secret = sub.add_parser(
        "secret",
        help="make (or replace) a caller's webhook secret; printed once, on the last line",
        description="Make a new webhook secret for a caller, replacing any old one, printed "
        "once on the last line as whsec_<base64>. It signs the caller's webhook deliveries "
        "(Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature headers) so its "
        "receiver can check them. Restart the server to use a new secret.",
    )
    secret.add_argument("name", help="the caller, as `keys add` named it")
    _keys_flag(secret)
    secret.set_defaults(func=main, action=_secret)
    _register_secrets_key(sub)


def _register_secrets_key(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    sealing = sub.add_parser(
        "secrets-key",
        help="write a new key to the secrets key file of `serve --secrets-key-file` (never "
        "printed)",
        description="Write a new random key into FILE, made with mode 600 if missing. "
        "`serve --secrets-key-file FILE` stores a target's Cookie and Authorization "
        "encrypted with the file's first key and opens them with any of its keys, so every "
        "instance of a fleet must have the same file. Without a flag the new key goes first: "
        "it seals from each instance's next start, and the older keys still open what they "
        "sealed. For a rolling restart, add it with --standby, restart every instance, then "
        "--promote it and restart them again. The key is never printed.",
    )
    sealing.add_argument("file", metavar="FILE", help="the secrets key file")
    where = sealing.add_mutually_exclusive_group()
    where.add_argument(
        "--standby",
        action="store_true",
        help="add the new key last: instances open with it after their restart, none seals "
        "with it yet",
    )
    where.add_argument(
        "--promote",
        action="store_true",
        help="add no key: move the last key first, so that it seals from the next start",
    )
    sealing.set_defaults(func=_secrets_key)


def _keys_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keys",
        metavar="FILE",
        default=DEFAULT_KEYS,
        help=f"the keys file (default {DEFAULT_KEYS}; created if missing)",
    )


def main(args: argparse.Namespace) -> int:
    """The ``keys`` subcommand: its action, once the server extra is known to be installed."""
    try:
        from ..http import KeysFileError  # noqa: F401  # the actions import from trio_batch.http
    except ModuleNotFoundError as exc:
        print(missing_extra("keys", exc, "server"), file=sys.stderr)
        return 2

    action: Callable[[argparse.Namespace], int] = args.action
    return action(args)


def _add(args: argparse.Namespace) -> int:
    from ..http import KeysFileError, add_key

    try:
        record, key = add_key(
            args.keys, args.name, workspace=args.workspace, caller_class=args.caller_class
        )
    except KeysFileError as exc:
        print(f"trio-batch keys add: {exc}", file=sys.stderr)
        return 2
    workspace = f"workspace {record.workspace!r}" if record.workspace else "no workspace"
    print(f"added caller {record.name!r} ({workspace}, class {record.caller_class}) to {args.keys}")
    print("the key is shown once; only its SHA-256 is kept. Send it as 'Authorization: Bearer KEY'")
    print(key)
    return 0


def _list(args: argparse.Namespace) -> int:
    from ..http import KeysFileError, load_keys

    try:
        ring = load_keys(args.keys)
    except KeysFileError as exc:
        print(f"trio-batch keys list: {exc}", file=sys.stderr)
        return 2
    # name, then key=value fields; a field without a value (no workspace) is left out.
    for record in ring:
        workspace = f"\tworkspace={record.workspace}" if record.workspace else ""
        print(f"{record.name}{workspace}\tclass={record.caller_class}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from ..http import KeysFileError, remove_key

    try:
        removed = remove_key(args.keys, args.name)
    except KeysFileError as exc:
        print(f"trio-batch keys remove: {exc}", file=sys.stderr)
        return 2
    if not removed:
        print(
            f"trio-batch keys remove: no caller named {args.name!r} in {args.keys}", file=sys.stderr
        )
        return 2
    print(f"removed {args.name!r} from {args.keys}; restart the server to apply")
    return 0


def _secret(args: argparse.Namespace) -> int:
    from ..http import KeysFileError, set_webhook_secret

    try:
        record, secret = set_webhook_secret(args.keys, args.name)
    except KeysFileError as exc:
        print(f"trio-batch keys secret: {exc}", file=sys.stderr)
        return 2
    print(f"new webhook secret for {record.name!r} in {args.keys}; restart the server to apply")
    print("it is shown once; give it to the caller's webhook receiver to check signatures")
    print(secret)
    return 0


def _secrets_key(args: argparse.Namespace) -> int:
    """``keys secrets-key``: needs no extra (writing a key is base64 of random bytes)."""
    from .._sealing import SecretsKeyFileError, add_key, promote_key

    path: str = args.file
    try:
        count = promote_key(path) if args.promote else add_key(path, standby=args.standby)
    except SecretsKeyFileError as exc:
        print(f"trio-batch keys secrets-key: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"trio-batch keys secrets-key: cannot write {path}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    print(_secrets_key_said(path, count, args.standby, args.promote))
    return 0


def _secrets_key_said(path: str, count: int, standby: bool, promote: bool) -> str:
    """What ``keys secrets-key`` did to ``path`` (now of ``count`` keys), and what next."""
    keys = f"{count} key{plural(count)}"
    if promote:
        return (
            f"moved the last key of {path} first ({keys}): it seals from each instance's next\n"
            "start. Copy the file to every instance, then restart them."
        )
    if count == 1:
        return (
            f"wrote a new secrets key to {path}. Start every instance of the fleet with\n"
            f"--secrets-key-file {path} (the same file on each; keep it private)."
        )
    if standby:
        return (
            f"added a new key as the last line of {path} ({keys}): instances open with it\n"
            "after their restart. Once every instance has restarted with this file, run\n"
            f"`trio-batch keys secrets-key {path} --promote`."
        )
    return (
        f"added a new key as the first line of {path} ({keys}): it seals from each\n"
        "instance's next start; the older keys still open what they sealed. Copy the file\n"
        "to every instance, then restart them (for a rolling restart: --standby first)."
    )
