"""Any Unicode string, lone surrogates included, is a 400 naming the field: never a 500, and
never request text in a log line (issue 12, D4 and D8 of the security review)."""

from __future__ import annotations

import json
import logging

import pytest

from .support import Api, auth

SURROGATE = "\ud800"
URL = "https://example.org/page"


def raw(body: object) -> bytes:
    """JSON as a client sends it: ``\\ud800`` escaped, which any JSON parser reads back as a
    lone surrogate (``json.dumps`` escapes non-ASCII by default)."""
    return json.dumps(body).encode("ascii")


def target(**fields: object) -> dict[str, object]:
    return {"url": URL, **fields}


CASES: list[tuple[str, object, str]] = [
    ("field name", target(**{SURROGATE: 1}), "{where}.\\ud800"),
    ("option name", target(options={SURROGATE: "x"}), "{where}.options.\\ud800"),
    ("url", target(url=f"https://example.org/{SURROGATE}"), "{where}.url"),
    *[
        (f"option {name}", target(options={name: f"a {SURROGATE} b"}), f"{{where}}.options.{name}")
        for name in ("mode", "question", "pages", "grep", "jq")
    ],
]


class TestLoneSurrogates:
    @pytest.mark.parametrize(("case", "item", "field"), CASES, ids=[c[0] for c in CASES])
    async def test_batch_answers_400_naming_the_field(
        self, api: Api, caplog: pytest.LogCaptureFixture, case: str, item: object, field: str
    ) -> None:
        """A lone surrogate anywhere in a target is a 400 whose field names where it is."""
        caplog.set_level(logging.DEBUG)
        r = await api.client.post("/v1/batch", content=raw({"targets": [item]}), headers=auth())

        assert 400 == r.status_code
        assert field.format(where="targets[0]") == r.json()["field"]
        assert r.json()["hint"]
        assert_no_request_text_logged(caplog)

    @pytest.mark.parametrize(("case", "item", "field"), CASES, ids=[c[0] for c in CASES])
    async def test_fetch_answers_400_naming_the_field(
        self, api: Api, caplog: pytest.LogCaptureFixture, case: str, item: object, field: str
    ) -> None:
        """The same holds for POST /v1/fetch, whose body is the target itself."""
        caplog.set_level(logging.DEBUG)
        r = await api.client.post("/v1/fetch", content=raw(item), headers=auth())

        assert 400 == r.status_code
        assert field.format(where="body") == r.json()["field"]
        assert_no_request_text_logged(caplog)

    async def test_top_level_field_name(self, api: Api, caplog: pytest.LogCaptureFixture) -> None:
        """An unknown top-level name is echoed escaped, so the answer can be encoded."""
        caplog.set_level(logging.DEBUG)
        r = await api.client.post(
            "/v1/batch", content=raw({"targets": [target()], SURROGATE: 1}), headers=auth()
        )

        assert (400, "\\ud800") == (r.status_code, r.json()["field"])
        assert r.json()["error"] == (
            "\\ud800 is not a field; the body has the fields targets, webhook, concurrency "
            "and robots"
        )
        assert_no_request_text_logged(caplog)

    async def test_a_surrogate_pair_is_text(self, api: Api) -> None:
        """An escaped surrogate pair is one character: accepted like any other text."""
        r = await api.client.post(
            "/v1/batch",
            content=raw({"targets": [target(options={"question": "why \U0001f600?"})]}),
            headers=auth(),
        )

        assert 202 == r.status_code

    async def test_long_names_are_shortened_in_the_answer(self, api: Api) -> None:
        """A 10,000-character field name is not echoed whole."""
        r = await api.client.post(
            "/v1/batch", content=raw({"targets": [target(**{"n" * 10_000: 1})]}), headers=auth()
        )

        assert 400 == r.status_code
        assert len(r.json()["field"]) < 100


def assert_no_request_text_logged(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        text = record.getMessage()
        assert SURROGATE not in text
        assert "\\ud800" not in text
        assert "example.org" not in text
        assert record.levelno < logging.ERROR, text
