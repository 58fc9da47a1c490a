"""Credentials sealed with a fleet's secret keys: what any instance with the key can open.

``trio_batch._sealing`` seals a ``Cookie`` or ``Authorization`` value (AES-SIV) for the store;
``trio_batch._headers.HeaderSecrets`` seals with keys when it has them and swaps the value back
at fetch time. The key file is what ``serve --secrets-key-file`` reads.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import string
from pathlib import Path

import pytest

from trio_batch import TargetError
from trio_batch._headers import HeaderSecrets
from trio_batch._sealing import (
    SealingKeys,
    SecretsKeyFileError,
    add_key,
    promote_key,
    read_key_file,
)

pytest.importorskip("cryptography")

TOKEN = "Bearer token-value-0d9e4b"
URL = "https://api.example/report"
OLD, NEW = b"o" * 32, b"n" * 32


def sealer(*keys: bytes) -> HeaderSecrets:
    """A process's credentials, sealing with the first of ``keys`` and opening with any."""
    return HeaderSecrets(keys=SealingKeys(keys))


def stored_value(secrets: HeaderSecrets, caller: str = "alice", url: str = URL) -> str:
    """The text the store keeps for ``caller``'s Authorization header."""
    return secrets.seal(caller, {"authorization": TOKEN}, url=url)["Authorization"]


def refusal(secrets: HeaderSecrets, value: str, caller: str = "alice", url: str = URL) -> str:
    """The 410 that opening ``value`` gets: its message and hint."""
    with pytest.raises(TargetError) as info:
        secrets.unseal(caller, {"Authorization": value}, url=url)
    assert 410 == info.value.status
    return f"{info.value.msg} / {info.value.hint}"


class TestSealed:
    def test_another_process_with_the_key_opens_it(self) -> None:
        """Sealed in one process, opened in another with the same key: the value, as sent;
        the stored text holds no part of it, and no process holds anything in memory."""
        here, there = sealer(NEW), sealer(NEW)
        stored = stored_value(here)

        assert TOKEN == there.unseal("alice", {"Authorization": stored}, url=URL)["Authorization"]
        assert "token-value" not in stored
        assert re.fullmatch(r"<sealed [0-9a-f]{8} [A-Za-z0-9_-]+>", stored)
        assert 0 == len(here) == len(there)

    def test_the_same_value_caller_and_key_give_the_same_text(self) -> None:
        """A repeated submit stores the same text (so it reuses its job, SPEC §3.1), in any
        process with the key; another value, caller, URL or key gives another text."""
        one = stored_value(sealer(NEW))

        assert one == stored_value(sealer(NEW))
        assert one != sealer(NEW).seal("alice", {"Authorization": TOKEN + "x"}, url=URL)
        assert one != stored_value(sealer(NEW), caller="bob")
        assert one != stored_value(sealer(NEW), url=URL + "?page=2")
        assert one != stored_value(sealer(OLD))

    def test_rotation_the_old_key_opens_the_new_one_seals(self) -> None:
        """After a rotation (new key first, old one kept), what the old key sealed still
        opens, new values are sealed with the new key, and a process with only the old key
        cannot open those: its 410 names the key file."""
        before = stored_value(sealer(OLD))
        rotated = sealer(NEW, OLD)
        after = stored_value(rotated)

        assert TOKEN == rotated.unseal("alice", {"Authorization": before}, url=URL)["Authorization"]
        assert after == stored_value(sealer(NEW))
        assert "--secrets-key-file does not hold" in refusal(sealer(OLD), after)

    @pytest.mark.parametrize("position", [17, 20, -3, -2])
    def test_a_changed_bit_does_not_open(self, position: int) -> None:
        """A sealed value changed in the store fails its target (410), never sends garbage:
        a bit of the tag or of the ciphertext, or one of base64's unused last bits (-2)."""
        stored = stored_value(sealer(NEW))
        alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
        flipped = alphabet[alphabet.index(stored[position]) ^ 1]  # the lowest of its 6 bits
        tampered = stored[:position] + flipped + stored[position + 1 :]

        assert (16 + len(TOKEN)) % 3  # so the last character carries unused bits
        assert "does not open" in refusal(sealer(NEW), tampered)

    def test_another_callers_or_urls_value_does_not_open(self) -> None:
        """A value is bound to its caller, header and URL: moved to another caller, or to a
        target at another URL (a site of someone who can write the store), it does not open."""
        stored = stored_value(sealer(NEW))

        assert "another caller or URL" in refusal(sealer(NEW), stored, caller="mallory")
        assert "another caller or URL" in refusal(sealer(NEW), stored, url="https://evil.test/")
        with pytest.raises(TargetError):
            sealer(NEW).unseal("alice", {"Cookie": stored}, url=URL)

    def test_without_keys_a_sealed_value_says_which_flag(self) -> None:
        """An instance started without the key file cannot open a sealed value: its 410
        says to start every instance with the same --secrets-key-file."""
        said = refusal(HeaderSecrets(), stored_value(sealer(NEW)))

        assert "has none" in said
        assert "--secrets-key-file" in said

    def test_without_keys_the_memory_reference_hints_at_the_key_file(self) -> None:
        """Without keys a value waits in memory; another instance's 410 says that a fleet
        needs the same --secrets-key-file on every instance, and which command writes one."""
        said = refusal(HeaderSecrets(), stored_value(HeaderSecrets()))

        assert "submit the job again" in said
        assert "--secrets-key-file" in said
        assert "trio-batch keys secrets-key" in said

    def test_keyed_applies_for_the_block_only(self) -> None:
        """``keyed`` seals with the keys inside its block and as before after it."""
        secrets = HeaderSecrets()
        with secrets.keyed(SealingKeys([NEW])):
            inside = stored_value(secrets)
        after = stored_value(secrets)

        assert inside.startswith("<sealed ")
        assert after.startswith("<secret ")

    def test_keys_never_show_in_a_repr(self) -> None:
        """A log line or traceback that prints the keys shows how many, not what."""
        shown = repr(SealingKeys([NEW, OLD]))

        assert "nnnn" not in shown
        assert "2 keys" in shown


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "secrets.key"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


class TestKeyFile:
    def test_add_writes_a_private_file_that_reads_back(self, tmp_path: Path) -> None:
        """A new file has one key, mode 600, and seals like any other process with it."""
        path = str(tmp_path / "secrets.key")

        assert 1 == add_key(path)
        assert 0o600 == stat.S_IMODE(os.stat(path).st_mode)
        keys = read_key_file(path)
        assert 1 == len(keys)
        assert stored_value(HeaderSecrets(keys=keys)) == stored_value(
            HeaderSecrets(keys=read_key_file(path))
        )

    def test_a_rotation_puts_the_new_key_first_and_keeps_the_old(self, tmp_path: Path) -> None:
        """`keys secrets-key` on an existing file: the new key seals, the old one opens."""
        path = str(tmp_path / "secrets.key")
        add_key(path)
        before = stored_value(HeaderSecrets(keys=read_key_file(path)))
        old_line = Path(path).read_text()

        assert 2 == add_key(path)
        rotated = HeaderSecrets(keys=read_key_file(path))
        assert Path(path).read_text().endswith(old_line)
        assert TOKEN == rotated.unseal("alice", {"Authorization": before}, url=URL)["Authorization"]
        assert before != stored_value(rotated)

    def test_standby_then_promote(self, tmp_path: Path) -> None:
        """A standby key opens but does not seal; promoted, it seals."""
        path = str(tmp_path / "secrets.key")
        add_key(path)
        first = stored_value(HeaderSecrets(keys=read_key_file(path)))

        assert 2 == add_key(path, standby=True)
        assert first == stored_value(HeaderSecrets(keys=read_key_file(path)))
        assert 2 == promote_key(path)
        promoted = HeaderSecrets(keys=read_key_file(path))
        assert first != stored_value(promoted)
        assert TOKEN == promoted.unseal("alice", {"Authorization": first}, url=URL)["Authorization"]

    def test_comments_blank_lines_and_missing_padding_are_fine(self, tmp_path: Path) -> None:
        """Lines starting with # and blank lines are skipped; the = of the base64 may go."""
        path = str(tmp_path / "secrets.key")
        add_key(path)
        key = Path(path).read_text().strip()
        path = key_file(tmp_path, f"# rotated 2026-01-02\n\n{key.rstrip('=')}\n")

        assert 1 == len(read_key_file(path))

    @pytest.mark.parametrize(
        ("text", "said"),
        [
            ("# only a comment\n", "holds no key"),
            ("c2hvcnQ=\n", "line 1: not a key"),
            ("# header\nnot base64 at all!\n", "line 2: not a key"),
            ("{key}\n\n{key}\n", "line 3: the same key as line 1"),
        ],
    )
    def test_a_malformed_file_is_refused_naming_the_line(
        self, tmp_path: Path, text: str, said: str
    ) -> None:
        """A line that is not a key (too short, not base64, a repeat) or no key at all: an
        error naming the file and the line and the command that writes one, no key in it."""
        key = "q" * 43 + "="
        path = key_file(tmp_path, text.format(key=key))

        with pytest.raises(SecretsKeyFileError) as info:
            read_key_file(path)

        assert path in str(info.value)
        assert said in str(info.value)
        assert key not in str(info.value)
        assert "not base64 at all" not in str(info.value)

    def test_a_missing_file_says_how_to_make_one(self, tmp_path: Path) -> None:
        """A path with no file names it and `trio-batch keys secrets-key`."""
        with pytest.raises(SecretsKeyFileError, match=r"does not exist.*keys secrets-key"):
            read_key_file(str(tmp_path / "nope.key"))

    @pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
    def test_a_file_others_can_change_is_refused(self, tmp_path: Path) -> None:
        """Group- or world-writable: refused (a planted first key would seal for them)."""
        path = str(tmp_path / "secrets.key")
        add_key(path)
        os.chmod(path, 0o620)

        with pytest.raises(SecretsKeyFileError, match=r"can be changed by other users.*chmod 600"):
            read_key_file(path)

    @pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
    def test_a_file_everyone_can_read_is_used_with_a_warning(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """World-readable (as Docker and Kubernetes mount secrets by default): a warning
        naming the file and chmod 600; the keys are used."""
        path = str(tmp_path / "secrets.key")
        add_key(path)
        os.chmod(path, 0o644)
        caplog.set_level(logging.WARNING, logger="trio_batch.sealing")

        assert 1 == len(read_key_file(path))
        [record] = caplog.records
        assert path in record.getMessage()
        assert "chmod 600" in record.getMessage()

    def test_adding_to_a_malformed_file_leaves_it_alone(self, tmp_path: Path) -> None:
        """`keys secrets-key` on a file that is not a key file refuses, changing nothing."""
        path = key_file(tmp_path, "hello\n")

        with pytest.raises(SecretsKeyFileError, match="line 1: not a key"):
            add_key(path)
        assert "hello\n" == Path(path).read_text()

    def test_promote_needs_two_keys(self, tmp_path: Path) -> None:
        """With one key there is nothing to promote: the error says to add one first."""
        path = str(tmp_path / "secrets.key")
        add_key(path)

        with pytest.raises(SecretsKeyFileError, match="--standby"):
            promote_key(path)
