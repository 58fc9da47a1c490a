"""The grep repeat bound holds for every spelling the ``regex`` module reads as a repeat.

``check_grep`` never compiles the caller's pattern, so it has to read counts the way regex's
parser does. These tests ask that parser itself (``regex._regex_core``, parse only: a parsed
``a{99999999}`` is one node, nothing is unrolled) which repeats a pattern holds, and hold the
scan to it: verbose mode's whitespace and comments inside the braces, scoped inline flags,
``\\p`` braces that hold no name, comments that end later than the first ``)``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from typing import Any

import pytest
import regex
from hypothesis import given, settings, strategies as st

from tests.support import fastest
from trio_batch import Options, TargetError
from trio_batch.web import validate_options
from trio_batch.web._extract._options import MAX_GREP_REPEAT, check_grep

HUGE = "99999999"
core: Any = importlib.import_module("regex._regex_core")  # its parser: no public API, no stubs


def regex_repeats(pattern: str) -> list[int]:
    """Every count of every repeat in ``pattern``, as regex (VERSION0) parses it.

    Raises:
        regex.error: regex does not parse it.
    """
    flags = regex.VERSION0
    while True:  # as regex._main._compile: a global flag set midway parses again
        source = core.Source(pattern)
        info = core.Info(flags, source.char_type, {})
        source.ignore_space = bool(info.flags & core.VERBOSE)
        try:
            parsed = core._parse_pattern(source, info)
        except core._UnscopedFlagSet:
            flags = info.global_flags
            continue
        break
    if not source.at_end():
        raise regex.error("unbalanced parenthesis", pattern, source.pos)
    return list(_counts(parsed))


def _counts(node: object) -> Iterator[int]:
    if isinstance(node, core.RegexBase):
        if hasattr(node, "min_count"):
            yield node.min_count
            yield node.max_count or 0
        for child in vars(node).values():
            yield from _counts(child)
    elif isinstance(node, list | tuple):
        for child in node:
            yield from _counts(child)


def refusal(pattern: str) -> TargetError:
    with pytest.raises(TargetError) as info:
        validate_options(Options(grep=pattern))
    assert info.value.status == 400
    assert info.value.hint
    return info.value


HOSTILE = [
    "(?x)a{ @ }",  # the audit's case
    "(?x)a{@ }",
    "(?x)a{ ,@}",
    "(?x)a{@, }",
    "(?x)a{ 1 , @ }",
    "(?x)a{\t@\n}",
    "(?x)a{#a comment\n@}",
    "(?x)a{@#}\n}",
    "(?x)a{9 9 9 9 9 9 9 9}",  # digits with spaces between: 99999999
    "(?x)a{9999#8\n9999}",  # a comment between digits; its own digits do not count
    "(?x)a{@\u3000}",  # any str.isspace character, not only ASCII whitespace
    "(?x)a{@\x1c}",
    "(?x:a{ @ })",  # scoped verbose flag
    "(?ix)a{ @ }",
    "(?x)(? i:a{ @ })",  # spaces inside the flags, in verbose mode
    "(?x)(?i#c\n)a{ @ }",
    "(?x)(?-x:b)a{ @ }",  # verbose again after the scoped group
    "(?-x:b)(?x)a{ @ }",
    "(?x)(?(1)b|c)a{ @ }(a)",
    "(?|(?x))a{ @ }",  # (?|...) does not restore the flags at its end
    "(?(?=a)(?x)|)a{ @ }",  # nor do the branches of a lookaround condition
    "(?x:b)#a{@}",  # outside the scoped group # is a literal, not a comment
    "a{,@}",
    "a{@,}",
    r"\p{3,@}",  # no property name in the braces: a literal p, repeated
    r"\N{3,@}",
    r"\p{a: }{@}",
    r"(?#\)[)a{@}]",  # the comment ends at the first unescaped ), not the \)
    "[[:é:]a{@}]",  # not a POSIX class, so the set ends at the first ]
    "[[:a: :]a{@}]",
]

LITERAL = [
    "a{ @ }",  # without verbose mode, braces with spaces are literal text
    "(?x:b)a{ @ }",  # verbose mode ended with its group
    "(?x)(?-x)a{ @ }",
    "(?x)(?-x:a{ @ })",
    "(?:(?x))a{ @ }",  # a group restores the flags at its end
    "(?=(?x))a{ @ }",
    "(?(?=a)b|c)a{ @ }",
    r"(?x)\{ @ }",
    "(?x)a#{@}",
    "(?x)a{@#}",  # the comment runs to the end: no closing brace
    "(?#{@})",
    "(?x)[ {@} ]",
    "[[:alpha:]{@}]",
    r"\p{L}{3}@",
    "a{\uff13}@",  # only ASCII digits count (a fullwidth 3 is text)
]


class TestRepeatSpellings:
    @pytest.mark.parametrize("template", HOSTILE)
    def test_every_spelling_of_a_huge_repeat_is_refused(self, template: str) -> None:
        """A repeat that regex reads as over 1,000, however it is spelled, is a 400 at submit."""
        pattern = template.replace("@", HUGE)

        assert max(regex_repeats(pattern)) > MAX_GREP_REPEAT
        assert "grep repeats more than 1,000 times" in refusal(pattern).msg

    @pytest.mark.parametrize("template", LITERAL)
    def test_braces_regex_reads_as_text_are_accepted(self, template: str) -> None:
        """Braces that regex reads as literal text (or in a comment) are no repeat at all."""
        pattern = template.replace("@", HUGE)

        assert max(regex_repeats(pattern), default=0) <= MAX_GREP_REPEAT
        check_grep(pattern)

    def test_the_refusal_says_where_and_what_to_do(self) -> None:
        """The verbose spelling gets the same message and hint as the plain one."""
        error = refusal(f"(?x) a {{ {HUGE} }}")

        assert error.msg == ("grep repeats more than 1,000 times at position 7; the limit is 1,000")
        assert error.hint == "use * or + for long runs, such as a+ instead of a{5000}"

    @pytest.mark.parametrize(
        "pattern",
        [
            "(?x)" + " {" * 2046,
            "(?x)" + "a{ 1 }" * 682,
            "(?x)" + "(? i)" * 818,
            "(?x)" + "\\p{" * 1364,
            "(?x)" + "#\n" * 2046,
            "{" * 4096,
            "(a)" * 1365,
        ],
    )
    def test_the_scan_stays_cheap(self, pattern: str) -> None:
        """A 4,096-character pattern is checked in a linear scan, verbose or not: at most a few
        times what a plain verbose pattern of the same length costs (measured in the same test,
        so a loaded machine slows both; about 2 ms each here, a blow-up would be seconds)."""

        def check(text: str) -> None:
            with contextlib.suppress(TargetError):
                check_grep(text)

        plain = ("(?x)" + "ab " * len(pattern))[: len(pattern)]
        elapsed = fastest(functools.partial(check, pattern))
        baseline = fastest(functools.partial(check, plain))

        assert elapsed < 10 * baseline  # about 2x here; an exponential scan would be 1,000x


TOKENS = [
    *("(?x)", "(?-x)", "(?x:", "(?-x:", "(?|", "(?(?=a)", "(?(?<=a)", "(?(1)", "(?#", "(?i)"),
    *("(?", "(", ")", "(?P<n>", "(?=", "(?>", "a", "x", "é", "{", "}", ",", "9999", "99"),
    *(" ", "\t", "\n", "\u3000", "#", "\\", "\\p", "\\N", "\\)", "[", "]", "[:", ":]", "|"),
    *("?", "*", "-", ":", "=", "<", "L", "^"),
]


class TestAgreesWithRegex:
    @settings(max_examples=3000, deadline=None)
    @given(st.lists(st.sampled_from(TOKENS), max_size=14).map("".join))
    def test_never_lets_a_huge_repeat_through(self, pattern: str) -> None:
        """Whatever regex parses with a count over the bound, the scan refuses; and a syntax
        refusal of the scan is a pattern regex does not parse."""
        try:
            counts: list[int] | None = regex_repeats(pattern)
        except (regex.error, ValueError, OverflowError, RecursionError):
            counts = None
        try:
            check_grep(pattern)
        except TargetError as error:
            if "is not a valid regular expression" in error.msg:
                assert counts is None
            return

        assert counts is None or max(counts, default=0) <= MAX_GREP_REPEAT
