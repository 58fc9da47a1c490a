"""``trio-batch map URL``: a site's URLs one a line, and ``map URL | run -`` fetches them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import trio

from tests.support import CLEAN_ENV
from trio_batch._cli._demo_site import DemoSite

from .support import CLI


async def run_map(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*CLI, "map", *args], env=CLEAN_ENV, capture_stdout=True, capture_stderr=True, check=False
    )


async def test_map_lists_the_start_page_and_its_links(site: DemoSite) -> None:
    """``trio-batch map`` prints the start page then its links, one a line, and notes the limit."""
    done = await run_map(site.url("/"), "--allow-net", "127.0.0.0/8", "--limit", "4")

    lines = done.stdout.decode().splitlines()
    assert 0 == done.returncode, done.stderr
    assert site.url("/") == lines[0]
    assert 4 == len(lines)
    assert all(line.startswith(site.url("/articles/")) for line in lines[1:])
    assert b"note: the site has more URLs than the limit of 4" in done.stderr


async def test_map_into_run(site: DemoSite, tmp_path: Path) -> None:
    """`trio-batch map URL | trio-batch run -`: one result line per mapped URL, in order."""
    mapped = await run_map(site.url("/"), "--allow-net", "127.0.0.0/8", "--limit", "3")
    assert 0 == mapped.returncode, mapped.stderr
    ran = await trio.run_process(
        [
            *CLI,
            "run",
            "-",
            "--allow-net",
            "127.0.0.0/8",
            "--progress",
            "off",
            "--db",
            str(tmp_path / "db.sqlite"),
        ],
        stdin=mapped.stdout,
        env=CLEAN_ENV,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=tmp_path,
    )

    lines = [json.loads(line) for line in ran.stdout.decode().splitlines()]
    assert 0 == ran.returncode, ran.stderr
    assert mapped.stdout.decode().splitlines() == [line["url"] for line in lines]
    assert {"done"} == {line["status"] for line in lines}


async def test_a_private_address_is_refused_with_the_flag_to_allow_it() -> None:
    """A private start page exits 1 naming ``--allow-net``, and prints no URL."""
    done = await run_map("http://127.0.0.1:9/")

    assert 1 == done.returncode
    assert b"--allow-net 127.0.0.0/8" in done.stderr
    assert b"" == done.stdout


async def test_a_bad_limit_is_a_usage_error() -> None:
    """``--limit 0`` is a usage error (exit 2) giving the range."""
    done = await run_map("https://example.org/", "--limit", "0")

    assert 2 == done.returncode
    assert b"from 1 to 10,000" in done.stderr
