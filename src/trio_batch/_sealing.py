"""Credentials sealed into the store under a fleet's secret keys: the key file and AES-SIV.

Without keys, a target's ``Cookie`` and ``Authorization`` values wait in the memory of the
process that admitted it (``trio_batch._headers``). With ``serve --secrets-key-file FILE``, the
same file on every instance of a fleet, each value is stored *sealed* instead:
``<sealed KEYID BASE64>``, an authenticated encryption of the value that any instance holding
the key opens at fetch time, so a target fetched by another instance, or after a restart with
``--resume``, still carries its credentials.

**The key file.** One key a line: the URL-safe base64 of 32 random bytes (44 characters;
:func:`add_key` writes one). The first key seals; every key opens, so keys rotate: add a new
one first, keep the old ones on later lines until the jobs they sealed are gone. Blank lines
and lines starting with ``#`` are skipped. :func:`read_key_file` refuses a malformed file with a
message naming the file and the line, never a key; it refuses a file other users can change (a
key they planted would seal every new credential for them) and warns about one every user of
the machine can read.

**The construction.** AES-SIV (RFC 5297, ``cryptography``'s ``AESSIV``), a *deterministic*
authenticated encryption, with the caller's name, the header's name and the target's URL as
associated data:

- Deterministic, on purpose: a job's idempotency key (SPEC §3.1) is computed over its targets'
  options as stored, so a repeated identical submit must store the same text to reuse its job.
  AES-SIV gives the same ciphertext for the same value, caller, header, URL and key; AES-GCM
  with a random nonce would give a new one each time (and a fixed or derived GCM nonce is
  unsafe). What the determinism tells a reader of the store: that two targets of one caller at
  one URL carry the same value, which their reused job says anyway.
- Authenticated: a changed byte, or a value moved to another caller, header or URL, does not
  open (the target fails 410). So someone who can write the store but lacks the key cannot
  point a credential at a site of theirs by editing a target's URL.
- Each line's 32 bytes are stretched by HKDF-SHA-256 into the 64-byte key of AES-256-SIV; the
  key's id in the sealed text is an HMAC of the key under a fixed label (it names which line
  opens the value and tells nothing of the key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal, final

from ._errors import Error
from ._util import plural

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESSIV

logger = logging.getLogger("trio_batch.sealing")

KEY_BYTES: Final = 32
"""Bytes of one key of the key file (before its base64)."""
MAKE_KEY: Final = "trio-batch keys secrets-key FILE"
"""The command that writes a new key (named by the messages and the flag's help)."""

_SEALED: Final = re.compile(r"<sealed ([0-9a-f]{8}) ([A-Za-z0-9_-]{22,})>")
_AD_LABEL: Final = b"trio-batch sealed header 1"
_HKDF_INFO: Final = b"trio-batch AES-SIV header key 1"
_ID_LABEL: Final = b"trio-batch secrets key id 1"
_NOT_A_KEY: Final = (
    "not a key (a key is 32 random bytes in URL-safe base64, 44 characters on a line of its own)"
)


@final
class SecretsKeyFileError(Error, ValueError):
    """The secrets key file cannot be used; the message names the file (and the line) and the
    fix, never a key."""


@final
class SealRefused(Exception):
    """A sealed value does not open: its key is not among ours, or it does not authenticate."""

    def __init__(self, why: Literal["unknown key", "altered"]) -> None:
        super().__init__(why)
        self.why = why


def is_sealed(value: str) -> bool:
    """Whether ``value`` is a sealed credential as the store keeps it."""
    return _SEALED.fullmatch(value) is not None


def _key_id(key: bytes) -> str:
    return hmac.new(key, _ID_LABEL, hashlib.sha256).hexdigest()[:8]


@final
class SealingKeys:
    """The keys of a key file: the first seals, every one opens (needs ``cryptography``).

    Args:
        keys: the raw keys, 32 bytes each, the sealing one first.

    Raises:
        ValueError: no key, or one that is not 32 bytes.
        ModuleNotFoundError: ``cryptography`` is not installed.
    """

    def __init__(self, keys: Sequence[bytes]) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESSIV
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        if not keys or any(len(key) != KEY_BYTES for key in keys):
            raise ValueError(f"SealingKeys needs one key or more, each {KEY_BYTES} bytes")
        self._ciphers: list[tuple[str, AESSIV]] = [
            (_key_id(key), AESSIV(HKDF(hashes.SHA256(), 64, None, _HKDF_INFO).derive(key)))
            for key in keys
        ]

    def __len__(self) -> int:
        return len(self._ciphers)

    def __repr__(self) -> str:
        return f"SealingKeys({len(self)} keys)"  # never a key

    def seal(self, caller: str, url: str, name: str, value: str) -> str:
        """``value`` of the header ``name`` of ``caller``'s target at ``url``, sealed with the
        first key: the same arguments always give the same text."""
        key_id, cipher = self._ciphers[0]
        data = cipher.encrypt(value.encode(), _associated(caller, url, name))
        return f"<sealed {key_id} {_text(data)}>"

    def open(self, caller: str, url: str, name: str, sealed: str) -> str:
        """The value :meth:`seal` sealed, given the same caller, URL and header name.

        Raises:
            SealRefused: ``"unknown key"`` (no key of ours has its id), or ``"altered"`` (it
                does not authenticate: changed, or sealed for another caller, URL or header).
        """
        from cryptography.exceptions import InvalidTag

        match = _SEALED.fullmatch(sealed)
        if match is None:
            raise SealRefused("altered")
        key_id, text = match.groups()
        ciphers = [cipher for id_, cipher in self._ciphers if id_ == key_id]
        if not ciphers:
            raise SealRefused("unknown key")
        try:
            data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raise SealRefused("altered") from None
        if _text(data) != text:  # one text per value: a change in the unused bits is one too
            raise SealRefused("altered")
        for cipher in ciphers:  # two lines with one id: a 1 in 4 billion chance, still handled
            try:
                return cipher.decrypt(data, _associated(caller, url, name)).decode()
            except (InvalidTag, UnicodeDecodeError):
                continue
        raise SealRefused("altered")


def _text(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _associated(caller: str, url: str, name: str) -> list[bytes]:
    """AES-SIV's associated data, each string a vector of its own: none runs into the next."""
    return [_AD_LABEL, caller.encode(), name.lower().encode(), url.encode()]


# -- the key file ---------------------------------------------------------------------------------


def new_key() -> str:
    """A new key as the key file holds it: 32 random bytes, URL-safe base64."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def _decoded(line: str) -> bytes | None:
    """The key a line holds, or None."""
    try:
        key = base64.b64decode(line + "=" * (-len(line) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if len(key) == KEY_BYTES else None


def _lines(data: bytes) -> list[str]:
    """The file's lines (any bytes kept, so a rewrite leaves a comment as it was)."""
    return [raw.decode("utf-8", "surrogateescape") for raw in data.splitlines()]


def _key_lines(path: str, lines: list[str]) -> list[tuple[int, bytes]]:
    """``(line index, key)`` of each key line of the file's ``lines``, checked.

    Raises:
        SecretsKeyFileError: a line is not a key, or repeats one.
    """
    found: list[tuple[int, bytes]] = []
    first_seen: dict[bytes, int] = {}
    for index, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key = _decoded(line)
        where = f"secrets key file {path}, line {index + 1}"
        if key is None:
            raise SecretsKeyFileError(f"{where}: {_NOT_A_KEY}; make one with `{MAKE_KEY}`")
        if key in first_seen:
            raise SecretsKeyFileError(
                f"{where}: the same key as line {first_seen[key] + 1}; remove one of them"
            )
        first_seen[key] = index
        found.append((index, key))
    return found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)
    except FileNotFoundError:
        raise SecretsKeyFileError(
            f"secrets key file {path} does not exist; write one with `{MAKE_KEY}`"
        ) from None
    except OSError as exc:
        raise SecretsKeyFileError(
            f"cannot read secrets key file {path}: {exc.strerror or type(exc).__name__}"
        ) from None


def _check_mode(path: str) -> None:
    """Refuse a key file other users can change; warn about one every user can read."""
    if os.name != "posix":
        return
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o022:
        raise SecretsKeyFileError(
            f"secrets key file {path} can be changed by other users (mode {mode:04o}): a key "
            f"they put first would seal every new credential for them; chmod 600 {path}"
        )
    if mode & 0o004:
        logger.warning(
            "secrets key file %s can be read by every user of this machine (mode %04o): "
            "chmod 600 it (or 640 for a group of its own)",
            path,
            mode,
        )


def read_key_file(path: str) -> SealingKeys:
    """The keys of the secrets key file at ``path``, the first one sealing.

    Raises:
        SecretsKeyFileError: the file is missing, unreadable, writable by other users, not
            all keys, or ``cryptography`` is not installed; the message names the file (and
            the line) and what to do, never a key.
    """
    path = os.fspath(path)
    keys = [key for _, key in _key_lines(path, _lines(_read(path)))]
    if not keys:
        raise SecretsKeyFileError(
            f"secrets key file {path} holds no key; write one with `{MAKE_KEY}`"
        )
    _check_mode(path)
    try:
        return SealingKeys(keys)
    except ModuleNotFoundError:
        raise SecretsKeyFileError(
            "--secrets-key-file needs the cryptography package: pip install 'trio-batch[server]'"
        ) from None


def add_key(path: str, *, standby: bool = False) -> int:
    """Write a new key into the key file at ``path`` (made, mode 600, if missing); its keys.

    The new key goes first, so it seals from each instance's next start while the others still
    open; with ``standby`` it goes last: every instance opens with it after its restart and
    none seals with it, the first step of a rolling change (:func:`promote_key` is the second).

    Raises:
        SecretsKeyFileError: the file exists and is not a key file (it is left as it is).
    """
    path = os.fspath(path)
    lines = _lines(_read(path)) if os.path.exists(path) else []
    keys = len(_key_lines(path, lines))
    _write(path, [*lines, new_key()] if standby else [new_key(), *lines])
    return keys + 1


def promote_key(path: str) -> int:
    """Move the last key of the key file at ``path`` first, so it seals; its keys.

    Raises:
        SecretsKeyFileError: the file is missing or not a key file, or holds one key only.
    """
    path = os.fspath(path)
    lines = _lines(_read(path))
    keys = _key_lines(path, lines)
    if len(keys) < 2:
        raise SecretsKeyFileError(
            f"secrets key file {path} holds {len(keys)} key{plural(len(keys))}: "
            f"there is no other to promote; add one with `{MAKE_KEY} --standby` first"
        )
    last = lines.pop(keys[-1][0])
    first = keys[0][0]
    _write(path, [*lines[:first], last, *lines[first:]])
    return len(keys)


def _write(path: str, lines: list[str]) -> None:
    """Replace the file at ``path`` by ``lines`` at once, readable by its owner only."""
    tmp = f"{path}.tmp-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("".join(f"{line}\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
