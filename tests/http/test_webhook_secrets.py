"""Webhook secrets in the keys file, and signatures as Standard Webhooks make them (SPEC §7)."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trio_batch.http import KeysFileError, add_key, load_keys, set_webhook_secret
from trio_batch.http._webhooks import signature, signed_headers

from .support import docs_verifier


def test_the_standard_webhooks_test_vector() -> None:
    """The published vector: a receiver's existing library accepts what we sign."""
    assert "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" == signature(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )


def test_each_part_of_the_message_is_signed() -> None:
    """Another id, timestamp or body gives another signature; the headers carry all three."""
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    base = signed_headers(secret, "msg_1", 1700000000, b"{}")

    assert base["webhook-id"] == "msg_1"
    assert base["webhook-timestamp"] == "1700000000"
    others = {
        signature(secret, "msg_2", 1700000000, b"{}"),
        signature(secret, "msg_1", 1700000001, b"{}"),
        signature(secret, "msg_1", 1700000000, b"{ }"),
    }
    assert base["webhook-signature"] not in others and len(others) == 3


class TestKeysSecret:
    def test_makes_a_32_byte_secret_kept_beside_the_key_hash(self, tmp_path: Path) -> None:
        """The secret is whsec_ + base64 of 32 bytes, stored for the caller alone, file 0600."""
        keys = tmp_path / "keys.toml"
        add_key(keys, "alice")
        bob, _ = add_key(keys, "bob")

        record, secret = set_webhook_secret(keys, "alice")
        ring = {r.name: r for r in load_keys(keys)}

        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
        assert ring["alice"].webhook_secret == secret == record.webhook_secret
        assert ring["bob"] == bob
        assert stat.S_IMODE(os.stat(keys).st_mode) == 0o600
        assert secret not in repr(ring["alice"])

    def test_a_second_call_replaces_the_secret(self, tmp_path: Path) -> None:
        """A new secret replaces the old one: the old one no longer signs anything."""
        keys = tmp_path / "keys.toml"
        add_key(keys, "alice")

        _, first = set_webhook_secret(keys, "alice")
        _, second = set_webhook_secret(keys, "alice")

        assert first != second
        assert [r.webhook_secret for r in load_keys(keys)] == [second]

    def test_an_unknown_caller_is_refused_with_the_command_to_add_it(self, tmp_path: Path) -> None:
        """A secret for a caller the file lacks is refused with the command that adds it."""
        keys = tmp_path / "keys.toml"
        add_key(keys, "alice")

        with pytest.raises(KeysFileError, match="trio-batch keys add carol"):
            set_webhook_secret(keys, "carol")

    @pytest.mark.parametrize("bad", ["s3cret", "whsec_", "whsec_!!!", "whsec_c2hvcnQ="])
    def test_a_bad_secret_in_the_file_names_the_field(self, tmp_path: Path, bad: str) -> None:
        """A malformed webhook_secret in the file fails the load naming the entry's field."""
        keys = tmp_path / "keys.toml"
        add_key(keys, "alice")
        keys.write_text(keys.read_text() + f'webhook_secret = "{bad}"\n')

        with pytest.raises(KeysFileError, match=r"keys\[0\]\.webhook_secret: .*keys secret NAME"):
            load_keys(keys)

    def test_the_command_prints_the_secret_once_on_its_last_line(self, tmp_path: Path) -> None:
        """`keys secret` prints the secret once, last, for scripts; an unknown name exits 2."""
        keys = tmp_path / "keys.toml"
        add_key(keys, "alice")
        cmd = [sys.executable, "-c", "from trio_batch._cli import entry; entry()"]

        done = subprocess.run(
            [*cmd, "keys", "secret", "alice", "--keys", str(keys)],
            capture_output=True,
            text=True,
            check=False,
        )
        missing = subprocess.run(
            [*cmd, "keys", "secret", "nobody", "--keys", str(keys)],
            capture_output=True,
            text=True,
            check=False,
        )

        last = done.stdout.strip().splitlines()[-1]
        assert done.returncode == 0
        assert last == next(iter(load_keys(keys))).webhook_secret
        assert done.stdout.count(last) == 1
        assert (missing.returncode, missing.stdout) == (2, "")
        assert "no caller named 'nobody'" in missing.stderr


def test_the_documented_verifier_accepts_what_we_sign_and_nothing_else() -> None:
    """A receiver following the docs accepts our deliveries, and refuses a changed one."""
    verify = docs_verifier()
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    body = b'{"type": "batch.end", "job_id": "j1", "data": {}}'
    headers = signed_headers(secret, "msg_j1_end", 1_800_000_000, body)

    assert verify(secret, headers, body, now=1_800_000_100)
    assert not verify(secret, headers, body + b" ", now=1_800_000_100)
    assert not verify(
        "whsec_" + base64.b64encode(b"x" * 32).decode(), headers, body, now=1_800_000_100
    )
    assert not verify(secret, {**headers, "webhook-id": "msg_other"}, body, now=1_800_000_100)
    assert not verify(secret, headers, body, now=1_800_000_000 + 301)
