"""The data types: validation with clear messages, JSON round trips, the idempotency key."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, strategies as st

from trio_batch import Caller, Config, Options, Result, RetryLater, Target, TargetError
from trio_batch._errors import find_retry_later
from trio_batch._headers import HeaderMap
from trio_batch._model import idempotency_key


class TestConfig:
    @pytest.mark.parametrize(
        "field",
        ["ttl", "targets_per_job", "jobs_per_caller", "jobs_total", "workers", "max_workers",
         "max_bytes", "retry_wait", "retry_for"],
    )  # fmt: skip
    def test_non_positive_values_name_the_field(self, field: str) -> None:
        """Zero or less is a ValueError that names the field and the value."""
        with pytest.raises(ValueError, match=rf"^Config\.{field} must be > 0 \(got 0\)$"):
            Config(**{field: 0})  # type: ignore[arg-type]

    def test_wrong_types(self) -> None:
        """A float for a count, or a string, is a TypeError."""
        with pytest.raises(TypeError, match=r"^Config.workers must be a whole number"):
            Config(workers=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^Config.ttl must be a number"):
            Config(ttl="1h")  # type: ignore[arg-type]

    def test_workers_clamped(self) -> None:
        """workers above max_workers is clamped, not an error."""
        assert 2 == Config(workers=9, max_workers=2).effective_workers


class TestOptionsTargets:
    def test_to_json_drops_empty_fields(self) -> None:
        """Only fields that differ from the default are kept; context=False is kept."""
        assert {} == Options().to_json()
        assert {"grep": "x", "context": False} == Options(grep="x", context=False).to_json()

    def test_from_json_round_trip_and_unknown_key(self) -> None:
        """from_json rebuilds options and names an unknown key."""
        opts = Options(mode="markdown", pages="1-3", recover=True)
        assert opts == Options.from_json(opts.to_json())
        with pytest.raises(ValueError, match=r"^unknown option 'colour'"):
            Options.from_json({"colour": "red"})

    def test_bad_types(self) -> None:
        """A wrongly typed option or target says which field."""
        with pytest.raises(TypeError, match=r"^Options.grep must be a string"):
            Options(grep=1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^Target.url must be a non-empty string"):
            Target("")
        with pytest.raises(ValueError, match=r"^Caller.name must be a non-empty string"):
            Caller("")
        with pytest.raises(ValueError, match=r"without NUL"):
            Caller("a\x00b")

    def test_max_age_is_whole_seconds_or_none(self) -> None:
        """max_age is an int (0 included) or None, kept in the JSON only when given."""
        assert {"max_age": 0} == Options(max_age=0).to_json()
        assert Options(max_age=60) == Options.from_json({"max_age": 60})
        with pytest.raises(TypeError, match=r"^Options.max_age must be a whole number of "):
            Options(max_age=True)
        with pytest.raises(TypeError, match=r"^Options.max_age must be a whole number of "):
            Options(max_age=1.5)  # type: ignore[arg-type]

    def test_result_json_round_trip(self) -> None:
        """A result survives the store's JSON."""
        result = Result("héllo", {"status": 200, "nested": {"a": [1, 2]}})
        assert result == Result.from_json(result.to_json())


class TestKey:
    def test_key_is_sha256_of_name_and_canonical_targets(self) -> None:
        """The key is SHA-256 of the caller's name, NUL, and the compact target JSON."""
        targets = [Target("https://a.test/", Options(grep="x"))]
        raw = 'alice\x00[{"options":{"grep":"x"},"url":"https://a.test/"}]'

        assert hashlib.sha256(raw.encode()).hexdigest() == idempotency_key(Caller("alice"), targets)

    def test_workspace_and_key_do_not_matter(self) -> None:
        """Only the caller's name takes part."""
        targets = [Target("https://a.test/")]
        assert idempotency_key(Caller("a"), targets) == idempotency_key(
            Caller("a", workspace="w", key_sha256="f" * 64), targets
        )


class TestErrors:
    def test_target_error_str_is_msg(self) -> None:
        """str(TargetError) is its message; hint and status ride along."""
        err = TargetError("too big", hint="ask for pages=1-5", status=413)
        assert ("too big", "ask for pages=1-5", 413) == (str(err), err.hint, err.status)
        assert 502 == TargetError("x").status

    def test_retry_later_found_in_chain(self) -> None:
        """A RetryLater in the cause or context chain is found; cycles end the search."""
        busy = RetryLater()
        hidden = KeyError("inner")
        hidden.__context__ = busy
        hidden.__suppress_context__ = True  # what `raise ... from None` does
        assert find_retry_later(hidden) is None
        wrapped = ValueError("outer")
        wrapped.__context__ = OSError("mid")
        wrapped.__context__.__cause__ = busy
        assert busy is find_retry_later(wrapped)
        loop = ValueError("a")
        loop.__context__ = loop
        assert find_retry_later(loop) is None


headers = st.dictionaries(st.sampled_from(["accept", "authorization", "cookie", "x-a"]), st.text())


class TestHeaderMap:
    @given(a=headers, b=headers)
    def test_equal_as_their_mappings_are_in_any_order(
        self, a: dict[str, str], b: dict[str, str]
    ) -> None:
        """Two header maps (or one and a plain mapping) are equal exactly when their names and
        values are, whatever their order; equal ones hash alike (options are hashed by them)."""
        left, right = HeaderMap(a), HeaderMap(reversed(list(b.items())))

        assert (left == right) == (a == b)
        assert (left == b) == (a == b)
        assert (left != right) == (a != b)
        if a == b:
            assert hash(left) == hash(right)

    def test_default_options_leave_their_headers_out(self) -> None:
        """Options whose headers are empty store none; set ones are stored."""
        assert "headers" not in Options(headers={}).to_json()
        assert {"accept": "text/html"} == Options(headers={"accept": "text/html"}).to_json()[
            "headers"
        ]


def test_a_target_without_options_serialises_and_hashes_as_one_with_default_options() -> None:
    """Targets made without options share one default instance, which ``Options.to_json``
    answers without testing its fields: the same (empty) JSON and the same idempotency key as
    a target given ``Options()`` of its own, and one option set still shows."""
    bare, explicit = Target("https://a.example/"), Target("https://a.example/", Options())
    assert bare.options is Target("https://b.example/").options
    assert explicit.options is not bare.options
    assert bare.to_json() == explicit.to_json() == {"url": "https://a.example/", "options": {}}
    caller = Caller("c")
    assert idempotency_key(caller, [bare]) == idempotency_key(caller, [explicit])
    assert Target("https://a.example/", Options(mode="text")).to_json()["options"] == {
        "mode": "text"
    }
