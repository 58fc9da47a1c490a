"""Submit-time option checks: bounded, and never compiling or running the caller's code."""

from __future__ import annotations

import jq  # type: ignore[import-not-found,unused-ignore]
import pytest
import regex
from hypothesis import given, settings, strategies as st

from tests.support import fastest
from trio_batch import Options, TargetError
from trio_batch.web import validate_options
from trio_batch.web._extract._options import MAX_GREP_SIZE, check_grep, check_jq


def refusal(options: Options) -> TargetError:
    with pytest.raises(TargetError) as info:
        validate_options(options)
    assert info.value.status == 400
    assert info.value.hint
    return info.value


class TestNothingIsCompiled:
    def test_valid_programs_pass_without_compiling(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """validate_options never calls a compiler: compiling is user code (a{9999999} took
        9.5 s and 2.7 GiB on the event loop), so it happens in a shaping worker."""

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("compiled at submit")

        monkeypatch.setattr(regex, "compile", refuse)
        monkeypatch.setattr(jq, "compile", refuse)

        validate_options(Options(grep=r"(?i)price|cost \d{1,3}[.,]\d\d", context=True))
        validate_options(Options(jq='.items[] | select(.price > 3) | "\\(.name): \\(.price)"'))

    @pytest.mark.parametrize("pattern", ["a{9999999}", "a{99999999}", "(?:a{1000}){1000}"])
    def test_huge_repeats_are_refused_in_microseconds(self, pattern: str) -> None:
        """The repeats that took seconds and GiBs to compile are refused by a scan, in about
        the time a small repeat is accepted (both measured in the same test: tens of µs)."""
        error = refusal(Options(grep=pattern))
        elapsed = fastest(lambda: refusal(Options(grep=pattern)))
        baseline = fastest(lambda: validate_options(Options(grep="a{10}")))

        assert error.msg.startswith("grep")
        assert elapsed < 10 * baseline  # about 1.3x here; compiling took 100,000x


class TestGrep:
    @pytest.mark.parametrize(
        ("pattern", "fragment"),
        [
            ("a{1001}", "grep repeats more than 1,000 times at position 1"),
            ("a{2,5000}", "the limit is 1,000"),
            ("(a{100}){1001}", "grep repeats more than 1,000 times"),
            ("(?:(?:a{100}){100}){11}", f"unroll to more than {MAX_GREP_SIZE:,} items"),
            ("(?V1)[[a]--[b]]", "cannot use the (?V0) or (?V1) flags"),
            ("(?V0)abc", "cannot use the (?V0) or (?V1) flags"),
            ("x(?iV1)y", "cannot use the (?V0) or (?V1) flags"),
            ("(unclosed", "missing ), unterminated subpattern"),
            ("a)", "unbalanced parenthesis at position 1"),
            ("[abc", "missing ], unterminated character set"),
            ("abc\\", "ends with a lone backslash"),
            ("(" * 101 + ")" * 101, "nests groups more than 100 deep"),
            ("x" * 5000, "the limit is 4,096"),
        ],
    )
    def test_refused_with_a_400(self, pattern: str, fragment: str) -> None:
        """A pattern the scan can tell is broken or too big is a 400 that says why."""
        assert fragment in refusal(Options(grep=pattern)).msg

    @pytest.mark.parametrize(
        "pattern",
        [
            r"a{1000}",
            r"(?:a{100}){100}",
            r"[]a]{3}",
            r"[^]]+",
            r"[[:alpha:]]+",
            r"\p{L}{2,5}",
            r"(?x) a ( # a comment with ( in it",
            r"(?P<word>\w+) (?P=word)",
            r"(?#comment)abc",
            r"a{,5}b{3,}c{x}",
            r"(?i:abc)|(?s).+",
            r"(a)?(?(1)b|c)",
            r"\(\)\[",
        ],
    )
    def test_accepted_when_the_compiler_accepts(self, pattern: str) -> None:
        """Valid patterns pass, comments, classes and escapes included."""
        if "(?x) a (" in pattern:
            pattern += "\n)"
        check_grep(pattern)
        regex.compile(pattern, flags=regex.VERSION0)

    @settings(max_examples=2000, deadline=None)
    @given(st.text(alphabet="a(){}[]\\*+?|^$#:x19,-=<>!PVi0&~ \n", max_size=14))
    def test_never_refuses_what_compiles(self, pattern: str) -> None:
        """A syntax refusal of the scan is also a compile error: the scan may let a broken
        pattern through (the worker then refuses it), never refuse a valid one."""
        try:
            check_grep(pattern)
        except TargetError as error:
            if "is not a valid regular expression" not in error.msg:
                return  # a bound (size, flags), not a syntax claim
            with pytest.raises((regex.error, ValueError, OverflowError)):
                regex.compile(pattern, flags=regex.VERSION0)


class TestJq:
    @pytest.mark.parametrize(
        ("program", "fragment"),
        [
            (".items[ | .name", "'[' at character 7 is never closed"),
            ('.a | "unclosed', "the string at character 6 is never closed"),
            ('"\\(.a"', "never closed"),
            (".a)", "unexpected ')' at character 3"),
            ("[" * 101 + "]" * 101, "nests more than 100 deep"),
            ("env.HOME", "'env'"),
            ("def f: input; f", "'input'"),
        ],
    )
    def test_refused_with_a_400(self, program: str, fragment: str) -> None:
        """Builtins that read the server, and strings or brackets left open, are a 400."""
        assert fragment in refusal(Options(jq=program)).msg

    @pytest.mark.parametrize(
        "program",
        [
            ".items[] | {name, price}",
            '"a \\("b \\(1 + 2) c") d"',
            ".a # a comment ( [ {\n| .b",
            '"\\"quoted\\" \\\\"',
            "def f: f; f",  # loops forever, but only a worker with a CPU limit ever runs it
        ],
    )
    def test_accepted_when_the_compiler_accepts(self, program: str) -> None:
        """Valid programs pass, interpolations and comments included."""
        check_jq(program)
        jq.compile(program)

    @settings(max_examples=1000, deadline=None)
    @given(st.text(alphabet='.a[](){}"\\|#\n :,', max_size=12))
    def test_never_refuses_what_compiles(self, program: str) -> None:
        """A refusal of the scan is also a compile error."""
        try:
            check_jq(program)
        except TargetError:
            with pytest.raises(ValueError, match="jq: error"):
                jq.compile(program)


class TestUnicode:
    @pytest.mark.parametrize("name", ["mode", "question", "pages", "grep", "jq"])
    def test_a_lone_surrogate_is_a_400_naming_the_option(self, name: str) -> None:
        """Any option with a lone surrogate (not Unicode text) is refused, never echoed."""
        error = refusal(Options(**{name: "ok \ud800 ok"}))  # type: ignore[arg-type]

        assert f"{name} is not valid Unicode text: character 4 is a lone surrogate" == error.msg

    def test_pairs_and_other_scripts_are_text(self) -> None:
        """A surrogate pair is one character; text in any script passes."""
        validate_options(Options(question="why \U0001f600 ÉTÉ 夏天 лето?"))
        validate_options(Options(grep="夏|лето|\U0001f600"))
