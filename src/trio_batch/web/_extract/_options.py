"""Checking a target's options at submit, without compiling or running any of them.

:func:`validate_options` runs on the event loop (the HTTP API calls it for every target of a
submit), so it must cost microseconds whatever it is sent. It never compiles a ``grep`` pattern
or a ``jq`` program: compiling is user code too (``a{9999999}`` took 9.5 s and 2.7 GiB in the
``regex`` module; ``jq.compile`` takes 1.6 ms for a trivial program). It checks their syntax
with bounds in one linear scan instead; the real compile happens in a shaping worker, and a
program the scan let through but the compiler refuses fails its target with the same 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ..._errors import TargetError
from ..._headers import check_headers
from ..._model import Options

MODES: Final = ("text", "markdown", "html", "raw")
FORMATS: Final = ("markdown", "text", "html", "raw", "links", "metadata")
"""What ``formats`` may list; the first four are text-like (one of them is the content)."""
TEXT_FORMATS: Final = frozenset(("markdown", "text", "html", "raw"))
MAX_OPTION_CHARS: Final = 4096
MAX_WAIT_FOR_CHARS: Final = 1024
"""Longest ``wait_for`` selector (the page evaluates it every 0.1 s while it waits)."""
MAX_GREP_REPEAT: Final = 1000
"""Largest count in a ``{m,n}`` repeat of ``grep`` (RE2's limit too)."""
MAX_GREP_SIZE: Final = 100_000
"""Most items a ``grep`` pattern expands to when its counted repeats are unrolled, as the
``regex`` module compiles them (``(a{1000}){100}`` is 100,000; compiling it takes ~70 ms)."""
MAX_NESTING: Final = 100
"""Deepest nesting of groups in ``grep`` or brackets in ``jq``."""

GREP_HINT: Final = (
    "grep takes a Python regular expression such as price|cost or (?i)total; "
    "escape special characters such as ( [ . with a backslash"
)
JQ_HINT: Final = "check it against the jq manual; for example jq=.items[].name"

JQ_DENIED = re.compile(
    r"\$ENV\b|\$__prog|(?<![\w$.])(env|import|include|input|inputs|debug|stderr|input_filename"
    r"|halt|halt_error|get_search_list|modulemeta|get_prog_origin|get_jq_origin)(?!\w)"
)
_PAGES = re.compile(r"^\s*\d+\s*(-\s*\d*\s*)?(,\s*\d+\s*(-\s*\d*\s*)?)*$")
_SPECIAL: Final = frozenset("\\[()|*+?{#")
_PLAIN = re.compile(r"[^\\\[()|*+?{#\s]+")  # characters that are one item each, in any mode
_IGNORABLE = re.compile(r"\s|#[^\n]*\n?")  # what verbose mode skips (\s is str.isspace)
_POSIX = re.compile(r"\[:\^?[A-Za-z0-9 &\-._]*(?:[:=]([A-Za-z0-9 &_\-./]*))?:\]")
_DIGITS: Final = frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class _Grammar:
    """What regex's parser (``regex._regex_core``, VERSION0) reads after a ``{``, ``(?``,
    ``\\p``, ``\\N`` or ``(?(``, in one regular expression each. In verbose mode whitespace
    and ``#`` comments may come between any two tokens, even between a count's digits."""

    ignored: re.Pattern[str]
    count: re.Pattern[str]
    flags: re.Pattern[str]
    prop: re.Pattern[str]
    named: re.Pattern[str]
    lookaround: re.Pattern[str]
    group_name: re.Pattern[str]

    @classmethod
    def of(cls, verbose: bool) -> _Grammar:
        one = r"(?:\s|#[^\n]*+\n?)" if verbose else "(?!)"
        j = one + "*+" if verbose else ""  # possessive: a comment is never cut short
        flag = rf"(?:{j}(?:[Labefimprsuwx]|V{j}[01]))"
        return cls(
            ignored=re.compile(j),
            count=re.compile(rf"{j}(?=[0-9,])((?:[0-9]{j})*+)(?:(,){j}((?:[0-9]{j})*+))?\}}"),
            flags=re.compile(rf"({flag}*+){j}(?:-({flag}*+){j})?([:)])"),
            prop=re.compile(
                rf"{j}\{{(?:{j}\^)?(?:{one}|[A-Za-z0-9 &\-._])*+"
                rf"(?:[:=]((?:{one}|[A-Za-z0-9 &_\-./])*+))?{j}\}}|{j}[CLMNPSZ]"
            ),
            named=re.compile(rf"{j}\{{[A-Za-z0-9 \-]*+{j}\}}"),
            lookaround=re.compile(rf"{j}\?{j}(?:[=!]|<{j}[=!])"),
            group_name=re.compile(rf"(?:{one}|[^)>])*+{j}\)"),
        )


_GRAMMARS: Final = (_Grammar.of(verbose=False), _Grammar.of(verbose=True))
_UNICODE_HINT: Final = (
    "send the text as UTF-8; a \\uD800-\\uDFFF escape in JSON must be one half of a surrogate pair"
)


def _bad(msg: str, hint: str) -> TargetError:
    return TargetError(msg, hint=hint, status=400)


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (not valid Unicode text), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_text(name: str, value: str) -> None:
    """Refuse a string that is not valid Unicode text (a lone surrogate such as ``\\ud800``).

    Raises:
        TargetError: status 400; the message names ``name``, never quotes the value.
    """
    at = lone_surrogate(value)
    if at is not None:
        raise _bad(
            f"{name} is not valid Unicode text: character {at + 1} is a lone surrogate",
            _UNICODE_HINT,
        )


def parse_pages(spec: str) -> list[tuple[int, int | None]]:
    """Page ranges ``1-3,7,10-`` as ``[(1, 3), (7, 7), (10, None)]`` (1-based, inclusive).

    Raises:
        TargetError: not a page list, a page 0, or a range that runs backwards (status 400).
    """
    hint = "write page numbers and ranges from 1, such as pages=1-3,7 or pages=10- (to the end)"
    if not _PAGES.match(spec):
        raise _bad(f"pages must be page numbers and ranges such as 1-3,7 (got {spec!r})", hint)
    ranges: list[tuple[int, int | None]] = []
    for part in spec.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        start = int(first)
        end: int | None = start if not dash else (int(last) if last else None)
        if start < 1 or (end is not None and end < start):
            raise _bad(f"pages has an invalid range {part!r} in {spec!r}", hint)
        ranges.append((start, end))
    return ranges


def _grep_error(detail: str, at: int) -> TargetError:
    return _bad(f"grep is not a valid regular expression: {detail} at position {at}", GREP_HINT)


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class that opens at ``start`` (``[``); -1 if unclosed."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a ] first in the class is a literal
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
        elif c == "]":
            return i + 1
        elif c == "[" and (posix := _POSIX.match(pattern, i)) and _has_value(posix):
            i = posix.end()  # [:alpha:], [:^alpha:], [:script=greek:], as regex reads them
        else:
            i += 1
    return -1


def _has_value(m: re.Match[str]) -> bool:
    """Whether a ``name:value`` property that ``m`` matched has a value (regex reads
    ``\\p{a: }`` as a ``p`` and ``[:a: :]`` as no POSIX class)."""
    return m[1] is None or bool(_IGNORABLE.sub("", m[1]).strip())


class _Source:
    """A ``grep`` pattern as regex's parser reads it (``regex._regex_core.Source``): at
    ``pos``, with verbose mode on or off (``(?x)``, scoped as regex scopes flags)."""

    __slots__ = ("pattern", "pos", "verbose")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.pos = 0
        self.verbose = False

    def skip(self, pos: int) -> int:
        """Where the next token starts: past the whitespace and comments verbose mode skips."""
        ignored = _GRAMMARS[1].ignored.match(self.pattern, pos) if self.verbose else None
        return pos if ignored is None else ignored.end()

    @property
    def grammar(self) -> _Grammar:
        return _GRAMMARS[self.verbose]

    def read(self, syntax: re.Pattern[str]) -> re.Match[str] | None:
        """Read what ``syntax`` (of :attr:`grammar`) matches here, if it does."""
        m = syntax.match(self.pattern, self.pos)
        self.pos = self.pos if m is None else m.end()
        return m

    def text(self, part: str | None) -> str:
        """A ``part`` of what :meth:`read` matched, without the whitespace and comments."""
        return _IGNORABLE.sub("", part or "") if self.verbose else part or ""


def _paren(src: _Source, at: int, groups: list[tuple[bool, bool]]) -> int:
    """Read the start of what the ``(`` at ``at`` opens; push the groups it opens as
    ``(restores flags at its end, verbose before)`` and return how many.

    Inline flags (``(?x)``) open none and set ``src.verbose`` until the enclosing group ends,
    and a comment (``(?#...)``, ended by the first ``)`` that no backslash escapes) is read
    whole. A group restores the flags at its end, but ``(?|...)`` and a condition's branches
    after a lookaround (``(?(?=...)yes|no)``) do not, as in regex.
    """
    verbose, pattern = src.verbose, src.pattern
    kind = pattern[at + 2 : at + 3]  # after "(?"
    src.pos = at + 3
    if kind == "#":
        end = src.pos
        while end < len(pattern) and pattern[end] != ")":
            end += 2 if pattern[end] == "\\" else 1
        if end >= len(pattern):
            raise _grep_error("missing ), unterminated comment", at)
        src.pos = end + 1
        return 0
    if kind == "(" and src.read(src.grammar.lookaround):
        groups.extend([(False, verbose), (True, verbose)])
        return 2
    if kind == "(" and not src.read(src.grammar.group_name):
        raise _grep_error("missing ) after the condition's group", at)
    if (kind and kind in "(|=!<P>R&0123456789") or (
        kind in ("+", "-") and pattern[src.skip(src.pos) : src.skip(src.pos) + 1] in _DIGITS
    ):  # a condition, (?|...), a lookaround, named group, reference or call
        groups.append((kind != "|", verbose))
        return 1
    src.pos -= 1
    flags = src.read(src.grammar.flags)
    on, off = (src.text(flags[1]), src.text(flags[2])) if flags else ("", "")
    if "V" in on + off:  # V0 or V1
        raise _bad(
            "grep cannot use the (?V0) or (?V1) flags: it is a Python re pattern",
            "remove the flag; set operations such as [[a-z]--[aeiou]] are not available",
        )
    if flags:
        src.verbose = (verbose or "x" in on) and "x" not in off
    if flags and flags[3] == ")":
        return 0
    groups.append((True, verbose))  # a scoped group, or not flags at all (regex refuses it)
    return 1


def check_grep(pattern: str) -> None:
    """Check a ``grep`` pattern's syntax with bounds, in one pass, without compiling it.

    Refuses unbalanced parentheses, an unterminated ``[...]``, a trailing backslash, a repeat
    count over ``MAX_GREP_REPEAT``, counted repeats that unroll to more than ``MAX_GREP_SIZE``
    items, groups nested deeper than ``MAX_NESTING``, and the ``(?V0)``/``(?V1)`` flags (grep
    is Python ``re`` syntax; VERSION1 sets make the ``regex`` module raise a ``ValueError``).
    What it lets through may still fail to compile, in the shaping worker.

    It reads repeats as the ``regex`` module (VERSION0) does, so no other spelling of a count
    slips past the bound: verbose mode (``(?x)``, scoped as regex scopes flags) skips
    whitespace and ``#`` comments even inside the braces and between digits (``(?x)a{ 9 9 }``
    is ``a{99}``); ``{,n}``, ``{n,}`` and ``{,}`` count; ``\\p`` or ``\\N`` with braces that
    hold no name is a letter repeated; a ``(?#...)`` comment ends at its first unescaped ``)``.

    Raises:
        TargetError: status 400, naming the problem and its position.
    """
    count = _GrepCount(pattern)
    src = count.src
    while (at := src.skip(src.pos) if src.verbose else src.pos) < len(pattern):
        count.step(at)

    if count.groups:
        raise _grep_error("missing ), unterminated subpattern", len(pattern))


class _GrepCount:
    """What :func:`check_grep` has read of a pattern so far: where it is, the groups still
    open, and the items each holds with its counted repeats unrolled (the size regex would
    compile)."""

    __slots__ = ("groups", "last", "sizes", "src")

    def __init__(self, pattern: str) -> None:
        self.src = _Source(pattern)
        self.sizes = [0]
        """Items in each open group (and the whole pattern), repeats unrolled."""
        self.groups: list[tuple[bool, bool]] = []
        """Each open group: (restores flags at its end, verbose before it)."""
        self.last = 0
        """Items of the atom a quantifier would repeat (0: nothing to repeat)."""

    def step(self, at: int) -> None:
        """Read the token at ``at`` and count the items it adds."""
        c = self.src.pattern[at]
        self.src.pos = at + 1
        if c == "(":
            self._open(at)
            return
        if c == "|" or c in "*+?":
            self.last = 0 if c == "|" else self.last
            return  # no unrolling (and *? +? ?? *+ are lazy or possessive forms)

        atom = self._atom(c, at)
        self.sizes[-1] += atom
        if self.sizes[-1] > MAX_GREP_SIZE:
            raise _too_big()
        self.last = atom

    def _atom(self, c: str, at: int) -> int:
        """Read what starts with ``c`` at ``at``: a run of literals, an escape, a set, a
        group's end or a repeat count; the items it adds (the last literal's, for a run)."""
        src, pattern = self.src, self.src.pattern
        if c not in _SPECIAL and (plain := _PLAIN.match(pattern, at)):
            src.pos = plain.end()  # a run of literals: one item each, the last is the atom
            self.sizes[-1] += src.pos - at - 1
        elif c == "\\":
            self._escape(at)
        elif c == "[":
            src.pos = _class_end(pattern, at)
            if src.pos < 0:
                raise _grep_error("missing ], unterminated character set", at)
        elif c == ")":
            return self._close(at)
        elif c == "{" and (counts := src.read(src.grammar.count)):
            return self._repeat(at, counts)
        return 1

    def _escape(self, at: int) -> None:
        src, pattern = self.src, self.src.pattern
        if at + 1 == len(pattern):
            raise _grep_error("the pattern ends with a lone backslash", at)

        src.pos = at + 2  # \p{Letter}, \pL and \N{EM DASH} are one item; \p{3,9} is not
        if pattern[at + 1] in "pP" and (prop := src.read(src.grammar.prop)):
            src.pos = prop.end() if _has_value(prop) else at + 2
        elif pattern[at + 1] == "N":
            src.read(src.grammar.named)

    def _open(self, at: int) -> None:
        src = self.src
        if src.pattern.startswith("?", at + 1):
            opened = _paren(src, at, self.groups)
        else:
            opened = 1  # a capture group (or a verb such as (*FAIL))
            self.groups.append((True, src.verbose))

        self.sizes.extend([0] * opened)
        if len(self.sizes) > MAX_NESTING + 1:
            raise _bad(f"grep nests groups more than {MAX_NESTING} deep", "flatten the pattern")
        self.last = 0 if opened else self.last

    def _close(self, at: int) -> int:
        """The end of a group: its flags end, and its items are the atom a quantifier may
        repeat."""
        if not self.groups:
            raise _grep_error("unbalanced parenthesis", at)

        restores, verbose = self.groups.pop()
        self.src.verbose = verbose if restores else self.src.verbose
        return max(self.sizes.pop(), 1)

    def _repeat(self, at: int, counts: re.Match[str]) -> int:
        """A counted repeat unrolls the atom before it; nothing is left to repeat after it."""
        count = max(_count(self.src.text(counts[1])), _count(self.src.text(counts[3])))
        if count > MAX_GREP_REPEAT:
            raise _bad(
                f"grep repeats more than {MAX_GREP_REPEAT:,} times at position {at}; the "
                f"limit is {MAX_GREP_REPEAT:,}",
                "use * or + for long runs, such as a+ instead of a{5000}",
            )

        self.sizes[-1] += self.last * (max(count, 1) - 1)
        return 0


def _count(digits: str) -> int:
    return int(digits or 0) if len(digits) <= 6 else 10**6  # never int() thousands of digits


def _too_big() -> TargetError:
    return _bad(
        f"grep's counted repeats unroll to more than {MAX_GREP_SIZE:,} items",
        "use smaller counts, or * and + instead of nested counts such as (a{100}){1000}",
    )


_JQ_CLOSERS: Final = {"(": ")", "[": "]", "{": "}", '"': '"', "\\(": ")"}


def check_jq(program: str) -> None:
    """Check a ``jq`` program without compiling it: the builtins it may not use, and that its
    strings end and its brackets balance (nested at most ``MAX_NESTING`` deep).

    Raises:
        TargetError: a refused builtin (``env``, ``$ENV``, ``input``, ``import``...), or a
            string or bracket that is never closed (status 400).
    """
    denied = JQ_DENIED.search(program)
    if denied:
        raise _bad(
            f"the jq program uses {denied.group(0)!r}, which is not available here",
            "jq runs on the response only: environment, input and module builtins are off",
        )
    stack: list[tuple[str, int]] = []  # what is open ("(", "[", "{", '"', "\\(") and where
    i, n = 0, len(program)
    while i < n:
        c = program[i]
        if stack and stack[-1][0] == '"':
            if program.startswith("\\(", i):
                stack.append(("\\(", i))
            elif c == '"':
                stack.pop()
            i += 2 if c == "\\" else 1
            continue
        if c == "#":
            i = _comment_end(program, i)
            continue
        if c in '([{"':
            stack.append((c, i))
            if len(stack) > MAX_NESTING:
                raise _bad(f"the jq program nests more than {MAX_NESTING} deep", JQ_HINT)
        elif c in ")]}":
            if not stack or _JQ_CLOSERS[stack[-1][0]] != c:
                raise _bad(
                    f"the jq program does not compile: unexpected {c!r} at character {i + 1}",
                    JQ_HINT,
                )
            stack.pop()
        i += 1
    if stack:
        opener, at = stack[-1]
        what = "the string" if opener == '"' else repr(opener)
        raise _bad(
            f"the jq program does not compile: {what} at character {at + 1} is never closed",
            JQ_HINT,
        )


def _comment_end(program: str, start: int) -> int:
    """The index after a jq comment: it ends at a newline, unless an odd number of
    backslashes comes before it (jq 1.7.1 continues the comment on the next line then)."""
    i = start
    while True:
        newline = program.find("\n", i)
        if newline < 0:
            return len(program)
        before = program[i:newline].rstrip("\r")
        if (len(before) - len(before.rstrip("\\"))) % 2 == 0:
            return newline + 1
        i = newline + 1


def _strings(options: Options) -> Iterable[tuple[str, str]]:
    names = ("mode", "question", "pages", "grep", "jq", "wait_for")
    return ((name, getattr(options, name)) for name in names)


_SELECTOR_HINT: Final = "write a CSS selector such as #content or main article"


def check_main_content(options: Options) -> None:
    """Refuse ``main_content=false`` where no shape asked for could use it: ``mode`` ``raw``
    or ``html`` (the source) without ``formats``, or ``formats`` with none of ``text``,
    ``markdown`` and ``html``."""
    if options.main_content:
        return
    if options.formats:
        if not any(name in ("text", "markdown", "html") for name in options.formats):
            raise _bad(
                "main_content applies to the text, markdown and html formats, and formats "
                "lists none of them",
                "leave main_content out, or add text, markdown or html to formats",
            )
    elif options.mode in ("raw", "html"):
        raise _bad(
            f"main_content applies to text and markdown; mode={options.mode} is the source",
            "leave main_content out, or ask for mode=text or mode=markdown",
        )


def check_render(options: Options) -> None:
    """Refuse ``wait_for`` without ``render``, a ``wait_for`` that cannot be a selector (blank,
    too long, a control character), and ``render`` with options that never apply to the
    rendered page (an HTML document: ``jq`` reads JSON, ``pages`` a PDF) or to a render
    (``recover`` serves a cached copy, and rendered pages are not cached).

    Whether the selector is valid CSS is checked by the browser, at fetch time (400).

    Raises:
        TargetError: status 400, naming the option.
    """
    selector = options.wait_for
    if selector and not options.render:
        raise _bad(
            "wait_for applies with render only",
            "add render=true to load the page in a browser, or leave wait_for out",
        )
    if selector and not selector.strip():
        raise _bad("wait_for is blank", _SELECTOR_HINT)
    if len(selector) > MAX_WAIT_FOR_CHARS:
        raise _bad(
            f"wait_for is {len(selector):,} characters; the limit is {MAX_WAIT_FOR_CHARS:,}",
            _SELECTOR_HINT,
        )
    bad = next((i for i, c in enumerate(selector) if c < " " or "\x7f" <= c <= "\x9f"), None)
    if bad is not None:
        raise _bad(
            f"wait_for holds a control character at position {bad + 1}",
            _SELECTOR_HINT + " on one line",
        )
    if not options.render:
        return
    for name, what in (
        ("jq", "jq reads JSON"),
        ("pages", "pages reads a PDF"),
        ("recover", "recover serves a cached copy, and rendered pages are not cached"),
    ):
        if getattr(options, name):
            raise _bad(
                f"render and {name} cannot be used together: a rendered page is HTML and {what}",
                f"leave {name} out, or ask without render",
            )


_FORMATS_HINT: Final = (
    "formats lists each of markdown, text, html, raw, links, metadata at most once, such as "
    '["markdown", "links", "metadata"]'
)


def check_formats(options: Options) -> None:
    """Refuse a ``formats`` list with an unknown or repeated name, a ``mode`` that is not its
    first text-like format (``mode`` is the one-format shorthand), and ``grep``, ``question``
    or ``jq`` where they do not fit: ``grep`` and ``question`` narrow the content (the first
    text-like format), so they need one; ``jq`` shapes JSON, not the formats of a page.

    Raises:
        TargetError: status 400, naming the format or option.
    """
    formats = options.formats
    if not formats:
        return
    if len(formats) > len(FORMATS):
        raise _bad(f"formats lists {len(formats):,} names; at most {len(FORMATS)}", _FORMATS_HINT)
    seen: set[str] = set()
    for name in formats:
        if name not in FORMATS:
            check_text("formats", name)
            shown = name if len(name) <= 40 and name.isprintable() else name[:40] + "..."
            raise _bad(f"formats has an unknown format {shown!r}", _FORMATS_HINT)
        if name in seen:
            raise _bad(f"formats lists {name!r} twice", _FORMATS_HINT)
        seen.add(name)
    content = next((name for name in formats if name in TEXT_FORMATS), "")
    if options.mode and options.mode != content:
        raise _bad(
            f"mode={options.mode} contradicts formats, whose content is "
            f"{content or 'none (no text-like format)'}",
            "leave mode out and put the content's format first in formats",
        )
    for name in ("grep", "question"):
        if getattr(options, name) and not content:
            raise _bad(
                f"{name} narrows the content, and formats asks for none",
                "add markdown or text to formats, or leave " + name + " out",
            )
    if options.jq:
        raise _bad(
            "jq and formats cannot be used together: jq shapes a JSON response, formats a page",
            "use jq alone for a JSON URL, or formats without jq",
        )


def validate_options(options: Options) -> None:
    """Check a target's options before it is accepted; the HTTP API calls it at submit.

    Cheap and bounded, whatever it is sent: it compiles and runs nothing. Refuses text that is
    not valid Unicode (a lone surrogate), option values over 4,096 characters, an unknown
    ``mode``, a ``grep`` that is not a valid pattern by a bounded syntax check (unbalanced,
    repeats over 1,000 or unrolling past 100,000 items, the ``(?V1)`` flag), a ``jq`` program
    that uses a refused builtin or leaves a string or bracket open, a malformed ``pages`` list,
    ``headers`` a target may not send (``trio_batch._headers.header_refusal``: a name off the
    allow-list, a value with a line break, too long, too many), a ``wait_for`` that cannot be
    a selector (:func:`check_render`), a bad ``formats`` list (:func:`check_formats`),
    ``main_content=false`` where nothing asked for uses it (:func:`check_main_content`), a
    negative ``max_age``, and options that cannot go together (``jq`` with ``pages``, ``grep``
    with ``question``, ``context`` without either, ``wait_for`` without ``render``, ``render``
    with ``jq``, ``pages`` or ``recover``). Whether an option fits the
    response's content type is only known at fetch time, and a program the checks let through
    may still fail to compile then.

    Raises:
        trio_batch.TargetError: ``status`` 400, the message names the option and the problem.
    """
    for name, value in _strings(options):
        check_text(name, value)
        if len(value) > MAX_OPTION_CHARS and name != "wait_for":  # check_render's, shorter
            raise _bad(
                f"{name} is {len(value):,} characters; the limit is {MAX_OPTION_CHARS:,}",
                f"shorten {name}",
            )
    check_headers(options.headers)
    check_render(options)
    if options.mode and options.mode not in MODES:
        raise _bad(
            f"unknown mode {options.mode!r}",
            "mode is one of text (the default), markdown, html, raw",
        )
    check_formats(options)
    check_main_content(options)
    if options.max_age is not None and options.max_age < 0:
        raise _bad(
            f"max_age must be 0 or more seconds (got {options.max_age})",
            "0 always fetches; leave max_age out for the server's cache life",
        )
    if options.question and not options.question.strip():
        raise _bad("question is blank", "ask a question in words, or leave question out")
    if options.grep:
        check_grep(options.grep)
    if options.jq:
        check_jq(options.jq)
    if options.pages:
        parse_pages(options.pages)
    if options.jq and options.pages:
        raise _bad(
            "jq and pages cannot be used together: jq reads JSON and pages reads a PDF",
            "use jq for a JSON URL, or pages for a PDF URL",
        )
    if options.grep and options.question:
        raise _bad(
            "grep and question cannot be used together",
            "use grep for exact lines, or question for the most relevant passages",
        )
    if options.jq and options.mode in ("html", "markdown"):
        raise _bad(
            f"mode={options.mode} does not apply with jq, whose output is JSON",
            "leave mode out when using jq",
        )
    if options.context and not (options.grep or options.question):
        raise _bad(
            "context applies with grep or question only",
            "add grep= or question=, or leave context out",
        )
