"""API keys: a TOML file of callers, each with the SHA-256 of its key (never the key itself).

The file looks like::

    [[keys]]
    name = "alice"
    workspace = "research"
    class = "fleet"            # or "restricted"
    sha256 = "9f86d081884c7d65..."
    webhook_secret = "whsec_..."  # optional: signs this caller's webhooks (keys secret NAME)

The webhook secret is kept as is, since the server signs with it; the file is written readable
by its owner only. A presented key is hashed and compared with every stored hash in constant time
(:func:`hmac.compare_digest`), so the time a lookup takes does not say how much of a hash matched.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import os
import re
import secrets
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast, final

from .._errors import Error
from .._model import CALLER_CLASSES, Caller, CallerClass

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_FIELDS = ("name", "workspace", "class", "sha256", "webhook_secret")
# Standard Webhooks secrets: "whsec_" + base64 of the HMAC key (here 32 random bytes).
SECRET_PREFIX = "whsec_"
_MIN_SECRET_BYTES = 24
# Keys look like "tb_" + 43 URL-safe characters (256 random bits), easy to spot in a leak scan.
KEY_PREFIX = "tb_"


@final
class KeysFileError(Error, ValueError):
    """The keys file cannot be read or holds a bad entry; the message says which and how to fix."""


@final
@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One caller's entry in the keys file."""

    name: str
    workspace: str
    caller_class: CallerClass
    sha256: str
    webhook_secret: str = dataclasses.field(default="", repr=False)
    """``whsec_`` + base64 of the key that signs this caller's webhooks; empty: none yet."""

    def caller(self) -> Caller:
        """The engine's view of this caller (its name is what caps and ownership use)."""
        return Caller(self.name, self.workspace, self.sha256)


def hash_key(key: str) -> str:
    """Hex SHA-256 of a key, as the keys file stores it."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def new_key() -> str:
    """A fresh random key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def new_webhook_secret() -> str:
    """A fresh webhook secret: ``whsec_`` + base64 of 32 random bytes (Standard Webhooks)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def webhook_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret: its base64 part, decoded.

    Raises:
        KeysFileError: not ``whsec_`` + base64 of at least 24 bytes.
    """
    body = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error):
        key = b""
    if not secret.startswith(SECRET_PREFIX) or len(key) < _MIN_SECRET_BYTES:
        raise KeysFileError(
            "a webhook secret is 'whsec_' + base64 of at least 24 bytes; make one with: "
            "trio-batch keys secret NAME"
        )
    return key


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid caller name.

    Raises:
        KeysFileError: the name is empty, too long, or has characters other than letters,
            digits and ``. _ @ -``.
    """
    if not _NAME.match(name):
        raise KeysFileError(
            f"invalid caller name {name!r}: use 1-64 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return name


@final
class KeyRing:
    """The callers allowed in, looked up by key. Immutable once loaded."""

    def __init__(self, records: Sequence[KeyRecord] = ()) -> None:
        names = [r.name for r in records]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise KeysFileError(
                f"caller name {dupes[0]!r} appears more than once; names are unique"
            )
        self._records = tuple(records)
        self._by_hash = {r.sha256: r for r in records}

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[KeyRecord]:
        return iter(self._records)

    def lookup(self, key: str) -> KeyRecord | None:
        """The record whose hash matches ``key``, or None.

        Every stored hash is compared with :func:`hmac.compare_digest`, whether or not an
        earlier one matched.
        """
        presented = hash_key(key).encode()
        found: KeyRecord | None = None
        for record in self._records:
            if hmac.compare_digest(presented, record.sha256.encode()):
                found = record
        return found

    def by_hash(self, sha256: str) -> KeyRecord | None:
        """The record for a stored hash (for example a ``Caller.key_sha256``), or None."""
        return self._by_hash.get(sha256)

    @classmethod
    def from_toml(cls, text: str, *, source: str = "the keys file") -> KeyRing:
        """Parse the keys file's text.

        Raises:
            KeysFileError: not TOML, or an entry is missing a field or has a bad value; the
                message names the entry and the field.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise KeysFileError(f"{source} is not valid TOML: {exc}") from None
        unknown = sorted(set(data) - {"keys"})
        if unknown:
            raise KeysFileError(
                f"{source}: unknown table or key {unknown[0]!r}; only [[keys]] entries belong here"
            )
        entries = data.get("keys", [])
        if not isinstance(entries, list):
            raise KeysFileError(f"{source}: 'keys' must be an array of tables ([[keys]])")

        records = [_record(entry, f"{source}: keys[{i}]") for i, entry in enumerate(entries)]
        try:
            return cls(records)
        except KeysFileError as exc:
            raise KeysFileError(f"{source}: {exc}") from None

    def to_toml(self) -> str:
        """The keys file's text for these records."""
        lines = [
            "# trio-batch API keys: SHA-256 of each key, never the key itself.",
            "# Add one with: trio-batch keys add NAME --keys THIS_FILE",
        ]
        for r in self._records:
            lines += [
                "",
                "[[keys]]",
                f"name = {_toml_str(r.name)}",
                f"workspace = {_toml_str(r.workspace)}",
                f"class = {_toml_str(r.caller_class)}",
                f"sha256 = {_toml_str(r.sha256)}",
            ]
            if r.webhook_secret:
                lines.append(f"webhook_secret = {_toml_str(r.webhook_secret)}")
        return "\n".join(lines) + "\n"


def _record(entry: object, where: str) -> KeyRecord:
    """One ``[[keys]]`` entry of the keys file, checked field by field.

    Raises:
        KeysFileError: a field is missing, unknown or has a bad value; the message starts with
            ``where`` (the file and the entry's index) and names the field.
    """
    if not isinstance(entry, dict):
        raise KeysFileError(f"{where} must be a table")
    extra = sorted(set(entry) - set(_FIELDS))
    if extra:
        raise KeysFileError(f"{where} has an unknown field {extra[0]!r}; fields: {_FIELDS}")
    for field in ("name", "sha256"):
        if not isinstance(entry.get(field), str):
            raise KeysFileError(f"{where}.{field} is missing or not a string")

    workspace = entry.get("workspace", "")
    if not isinstance(workspace, str):
        raise KeysFileError(f"{where}.workspace must be a string")
    caller_class = entry.get("class", "fleet")
    if caller_class not in CALLER_CLASSES:
        raise KeysFileError(f"{where}.class must be 'fleet' or 'restricted' (got {caller_class!r})")
    sha = entry["sha256"].lower()
    if not _SHA256.match(sha):
        raise KeysFileError(f"{where}.sha256 must be 64 hex digits (the key's SHA-256)")
    try:
        name = check_name(entry["name"])
    except KeysFileError as exc:
        raise KeysFileError(f"{where}.name: {exc}") from None

    secret = entry.get("webhook_secret", "")
    if not isinstance(secret, str):
        raise KeysFileError(f"{where}.webhook_secret must be a string")
    if secret:
        try:
            webhook_key(secret)
        except KeysFileError as exc:
            raise KeysFileError(f"{where}.webhook_secret: {exc}") from None

    return KeyRecord(name, workspace, cast("CallerClass", caller_class), sha, secret)


def _toml_str(value: str) -> str:
    # A JSON string with ensure_ascii is a valid TOML basic string (json never emits "\/").
    return json.dumps(value, ensure_ascii=True)


def load_keys(path: str | os.PathLike[str]) -> KeyRing:
    """Read the keys file at ``path``.

    Raises:
        KeysFileError: the file is missing, unreadable or malformed (the message says which).
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise KeysFileError(
            f"keys file {path} does not exist; "
            f"create it with: trio-batch keys add NAME --keys {path}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeysFileError(f"cannot read keys file {path}: {type(exc).__name__}") from None
    return KeyRing.from_toml(text, source=path)


def add_key(
    path: str | os.PathLike[str], name: str, *, workspace: str = "", caller_class: str = "fleet"
) -> tuple[KeyRecord, str]:
    """Add a caller with a new key to the keys file (created if missing); return it and the key.

    The file is replaced atomically and is readable by its owner only. The key itself is not
    stored anywhere: the caller must keep it.

    Raises:
        KeysFileError: bad name or class, the name exists already, or the file is malformed.
    """
    path = os.fspath(path)
    check_name(name)
    if caller_class not in CALLER_CLASSES:
        raise KeysFileError(f"class must be 'fleet' or 'restricted' (got {caller_class!r})")
    ring = load_keys(path) if os.path.exists(path) else KeyRing()
    if any(r.name == name for r in ring):
        raise KeysFileError(
            f"a key named {name!r} exists already in {path}; choose another name, or remove "
            f"the old one with: trio-batch keys remove {name} --keys {path}"
        )
    key = new_key()
    record = KeyRecord(name, workspace, caller_class, hash_key(key))
    _write(path, KeyRing([*ring, record]))
    return record, key


def set_webhook_secret(path: str | os.PathLike[str], name: str) -> tuple[KeyRecord, str]:
    """Give the caller ``name`` a new webhook secret (replacing any); return it and the secret.

    The secret signs the caller's webhook deliveries (Standard Webhooks); a receiver checks
    them with it. The file is replaced atomically and is readable by its owner only.

    Raises:
        KeysFileError: no caller ``name`` in the file, or the file is missing or malformed.
    """
    path = os.fspath(path)
    ring = load_keys(path)
    old = next((r for r in ring if r.name == name), None)
    if old is None:
        raise KeysFileError(
            f"no caller named {name!r} in {path}; add one with: trio-batch keys add {name} "
            f"--keys {path}"
        )
    secret = new_webhook_secret()
    record = dataclasses.replace(old, webhook_secret=secret)
    _write(path, KeyRing([record if r is old else r for r in ring]))
    return record, secret


def remove_key(path: str | os.PathLike[str], name: str) -> bool:
    """Remove the caller ``name`` from the keys file; False if it was not there."""
    path = os.fspath(path)
    ring = load_keys(path)
    kept = [r for r in ring if r.name != name]
    if len(kept) == len(ring):
        return False
    _write(path, KeyRing(kept))
    return True


def _write(path: str, ring: KeyRing) -> None:
    tmp = f"{path}.tmp-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(ring.to_toml())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
