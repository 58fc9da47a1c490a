"""What an agent reads: every answer under the byte cap, pages that never skip a target, and the
input schemas that ``/openapi.json`` also serves.

The tools run in-process here (the SDK's own in-process client on the server), over an app of
``create_app`` on a scripted fetch function: no network, no subprocess.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.mcp.support import call, in_process
from trio_batch import Result
from trio_batch.http import MAX_BODY, openapi_document
from trio_batch.testing import ScriptedFetch

CAP = 4096


def url(i: int) -> str:
    return f"https://a.example/{i}"


async def test_a_long_page_is_cut_to_the_cap_and_says_so() -> None:
    """Content full of escapes and multi-byte letters is cut on a letter, under the cap."""
    fetch = ScriptedFetch()
    content = 'é"\n\\ ' * 10_000
    fetch.script(url(0), Result(content, {"status": 200}))
    async with in_process(fetch, cap=CAP) as client:
        result = await client.call_tool("fetch", {"url": url(0)})

    text = result.content[0]
    assert text.type == "text"
    answer = json.loads(text.text)
    shown = answer["result"]["content"]
    assert len(text.text.encode("utf-8")) <= CAP
    assert content.startswith(shown)
    assert len(content.encode("utf-8")) == answer["content_cut"]["total_bytes"]
    assert len(shown.encode("utf-8")) == answer["content_cut"]["shown_bytes"]
    assert {"status": 200} == answer["result"]["meta"]


async def test_pages_of_results_fit_the_cap_and_skip_no_target() -> None:
    """A page holds the whole targets that fit; next_cursor starts at the first left out."""
    fetch = ScriptedFetch()
    sizes = [100, 1500, 1500, 9000, 50, 50, 3000, 10]
    for i, n in enumerate(sizes):
        fetch.script(url(i), Result("x" * n))
    async with in_process(fetch, cap=CAP) as client:
        failed, job = await call(
            client, "batch_submit", {"targets": [url(i) for i in range(len(sizes))], "wait": 60}
        )
        assert not failed
        seen: list[int] = []
        cursor: object = None
        pages = 0
        while True:
            args: dict[str, object] = {"id": job["id"], "limit": 100}
            if cursor is not None:
                args["cursor"] = cursor
            result = await client.call_tool("batch_results", args)
            text = result.content[0]
            assert text.type == "text"
            assert len(text.text.encode("utf-8")) <= CAP
            page = json.loads(text.text)
            seen += [row["idx"] for row in page["results"]]
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break

    assert list(range(len(sizes))) == seen
    assert pages > 2


async def test_a_job_id_a_cursor_and_a_wait_are_checked_with_hints() -> None:
    """The MCP server's own arguments are refused before any request, each with a hint."""
    async with in_process(ScriptedFetch(), cap=CAP) as client:
        answers = [
            await call(client, "batch_status", {"id": "a/b"}),
            await call(client, "batch_status", {"id": "a" * 100_000}),
            await call(client, "batch_results", {"id": "abc", "cursor": "-1"}),
            await call(client, "batch_results", {"id": "abc", "limit": 0}),
            await call(client, "batch_status", {"id": "abc", "wait": 301}),
            await call(client, "no_such_tool", {}),
        ]

    assert [True] * 6 == [failed for failed, _ in answers]
    assert ["id", "id", "cursor", "limit", "wait", "name"] == [a["field"] for _, a in answers]
    assert all(a["hint"] for _, a in answers)


async def test_the_instructions_name_every_tool() -> None:
    """What a model reads first about the server names each of its tools."""
    from trio_batch._mcp import TOOLS

    async with in_process(ScriptedFetch(), cap=CAP) as client:
        instructions = client.instructions or ""

    assert [] == [tool.name for tool in TOOLS if tool.name not in instructions]


def test_the_target_schemas_are_the_openapi_documents() -> None:
    """A target, its options and a webhook are the OpenAPI components, word for word."""
    from trio_batch._mcp import TOOLS

    document = json.loads(
        json.dumps(openapi_document(with_fetch=True, max_body=MAX_BODY, retry_after=5))
    )
    schemas = document["components"]["schemas"]
    submit = next(t for t in TOOLS if t.name == "batch_submit").input_schema
    defs = json.loads(json.dumps(submit))["$defs"]

    assert schemas["Options"] == defs["Options"]
    assert schemas["WebhookIn"] == defs["WebhookIn"]
    assert json.dumps(schemas["TargetIn"]).replace("components/schemas", "$defs") == json.dumps(
        defs["TargetIn"]
    )
    for tool in TOOLS:
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)


@pytest.mark.parametrize("cap", [0, 4095])
def test_a_cap_too_small_for_an_answer_is_refused(cap: int) -> None:
    """An answer cap below 4 KiB could not hold a summary and a cut note: refused."""
    from trio_batch._mcp import Tools

    with pytest.raises(ValueError, match=r"^answer_bytes must be at least 4096 \(got \d+\)$"):
        Tools(answer_bytes=cap)
