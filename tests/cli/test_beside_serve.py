"""``run`` beside a running ``serve``, and what ``serve``'s refusals tell a local operator.

``serve`` and ``run`` share the default store ``./trio-batch.sqlite``, which one process may
write; ``run`` in the server's folder names the server and the ``--server`` URL that sends the
work to it. A caller of ``serve`` may be its operator too (a server on their own machine), so a
refused private address names serve's ``--allow-net`` with the network it would take.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from tests.support import CLEAN_ENV
from trio_batch import Caller, Result, RetryLater, Target, TargetError
from trio_batch._cli._demo_site import DemoSite
from trio_batch._cli._output import operator_hint
from trio_batch._cli._service import serve_hints

from .support import CLI, add_key, running_serve

NAMED = "the host name resolves to a private or otherwise non-public address"
AT_SUBMIT = "the URL's host is a private or otherwise non-public address"
FETCHER_HINT = (
    "only public web addresses can be fetched; use the site's public host name, or ask the "
    "operator to allow this network"
)


class TestOperatorHint:
    @pytest.mark.parametrize(
        ("url", "net"),
        [
            ("http://127.0.0.1:8765/", "127.0.0.0/8"),
            ("http://localhost/", "127.0.0.0/8"),
            ("http://[::1]/", "::1/128"),
        ],
    )
    def test_this_machine_names_the_flag_and_the_loopback_network(self, url: str, net: str) -> None:
        """A loopback URL's hint says it is the server's machine and gives --allow-net NET."""
        hint = operator_hint(url, AT_SUBMIT, FETCHER_HINT)

        assert hint == (
            "only public addresses are fetched, and this one is on the server's own machine; "
            f"the server's operator can allow it with trio-batch serve --allow-net {net} (only "
            "for sites they trust)"
        )

    def test_a_private_address_names_it_and_its_network(self) -> None:
        """A literal private address: what a caller can do, and the operator's exact flag."""
        hint = operator_hint("http://10.1.2.3/", AT_SUBMIT, FETCHER_HINT)

        assert hint == (
            "only public addresses are fetched; use the site's public host name, or the "
            "server's operator can allow this address with trio-batch serve --allow-net "
            "10.1.2.3/32 (or its whole network, e.g. --allow-net 10.0.0.0/8)"
        )

    def test_a_host_name_gets_the_flag_with_an_example_network(self) -> None:
        """A name that resolved to a private address: the flag with a CIDR example."""
        hint = operator_hint("https://intranet.example.test/", NAMED, FETCHER_HINT)

        assert hint.endswith(
            "the server's operator can allow its private network with trio-batch serve "
            "--allow-net CIDR, e.g. --allow-net 10.0.0.0/8"
        )

    def test_other_refusals_keep_their_hint(self) -> None:
        """Only a private-address refusal is reworded."""
        assert "fix it" == operator_hint("http://a.example.test/", "not found", "fix it")


class TestServeHints:
    async def test_a_fetch_time_refusal_names_the_flag(self) -> None:
        """A host name that resolves privately (found only at fetch time) gets serve's hint."""

        async def refusing(caller: Caller, target: Target) -> Result:
            raise TargetError(NAMED, hint=FETCHER_HINT, status=403)

        with pytest.raises(TargetError) as refused:
            await serve_hints(refusing)(Caller("c"), Target("https://intranet.example.test/"))

        assert (NAMED, 403) == (refused.value.msg, refused.value.status)
        assert "trio-batch serve --allow-net CIDR" in refused.value.hint

    async def test_other_outcomes_pass_through_unchanged(self) -> None:
        """A result, another failure and a busy target are what the fetcher made them."""
        gone = TargetError("the page does not exist (404)", hint="check the URL", status=404)
        busy = RetryLater(after=3.0)
        outcomes: list[Result | BaseException] = [Result("ok"), gone, busy]

        async def scripted(caller: Caller, target: Target) -> Result:
            outcome = outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        fetch = serve_hints(scripted)
        target = Target("https://a.example.test/")
        result = await fetch(Caller("c"), target)
        with pytest.raises(TargetError) as failed:
            await fetch(Caller("c"), target)
        with pytest.raises(RetryLater) as retried:
            await fetch(Caller("c"), target)

        assert "ok" == result.content
        assert failed.value is gone
        assert retried.value is busy


@pytest.mark.slow
class TestBesideServe:
    async def test_run_in_the_servers_folder_names_it_and_the_server_flag(
        self, tmp_path: Path, site: DemoSite
    ) -> None:
        """`run` on serve's default store exits 2 naming the server, its URL and --server;
        doing what it says prints the lines through the server."""
        key = await add_key(tmp_path)
        (tmp_path / "urls.txt").write_text(site.url("/articles/1") + "\n")

        async with running_serve(["--allow-net", "127.0.0.1/32"], tmp_path) as (proc, port):
            beside = await trio.run_process(
                [*CLI, "run", "urls.txt"], cwd=tmp_path, env=CLEAN_ENV, capture_stdout=True,
                capture_stderr=True, check=False,
            )  # fmt: skip
            url = f"http://127.0.0.1:{port}"
            through = await trio.run_process(
                [*CLI, "run", "urls.txt", "--server", url], cwd=tmp_path,
                env={**CLEAN_ENV, "TRIO_BATCH_KEY": key}, capture_stdout=True, capture_stderr=True,
                check=False,
            )  # fmt: skip

        assert 2 == beside.returncode
        assert b"" == beside.stdout
        assert beside.stderr.decode() == (
            f"trio-batch run: trio-batch serve (pid {proc.pid}, on {url}) is writing "
            f"trio-batch.sqlite: send this work to it with --server {url} and your API key in "
            "TRIO_BATCH_KEY (or --key), or pass --db with another file for a store of your own\n"
        )
        assert 0 == through.returncode, through.stderr
        assert [(0, "done")] == [
            (line["idx"], line["status"]) for line in map(json.loads, through.stdout.splitlines())
        ]

    async def test_a_refused_private_address_names_the_operators_flag(self, tmp_path: Path) -> None:
        """POSTing a 127.0.0.1 URL to serve answers 400 with a hint naming --allow-net."""
        key = await add_key(tmp_path)
        batch = {"targets": [{"url": "http://127.0.0.1:8765/"}]}

        async with (
            running_serve([], tmp_path) as (_, port),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client,
        ):
            refused = await client.post(
                "/v1/batch", json=batch, headers={"Authorization": f"Bearer {key}"}
            )

        assert 400 == refused.status_code
        assert "trio-batch serve --allow-net 127.0.0.0/8" in refused.json()["hint"]
