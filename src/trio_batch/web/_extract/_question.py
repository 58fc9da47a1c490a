"""The ``question`` option: the passages of a page most relevant to a question (BM25).

Linear in the page: one pass splits it into paragraphs and counts, for each paragraph, its
length and how often each word *of the question* occurs; document frequencies come from those
counts once; scoring a paragraph costs as many steps as it has question words. So a page of
*n* characters costs O(*n*), whatever the number of paragraphs (the first version recomputed a
document frequency per paragraph and term: O(paragraphs²)). The content is capped at
``QUESTION_MAX_CHARS`` characters and ``QUESTION_MAX_PARAGRAPHS`` paragraphs, which bounds the
work per target to about a second of CPU time.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Final

from ..._errors import TargetError

QUESTION_PASSAGES: Final = 3
QUESTION_MAX_CHARS: Final = 12_000_000
"""Most characters of content ``question`` scores (about 1 s of CPU time here): more than
the text of a 10 MiB page (the fetcher's default ``max_bytes``)."""
QUESTION_MAX_PARAGRAPHS: Final = 100_000
"""Most paragraphs ``question`` scores (0.2-0.7 s of CPU time here)."""
QUESTION_MAX_TERMS: Final = 64
"""Most distinct words of a question that are scored (the first ones)."""

_K1: Final = 1.5
_B: Final = 0.75
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
_WORD = re.compile(r"\w+")
_STOPWORD_TEXT: Final = (
    "a an and are as at be but by did do does for from had has have how i if in into is it its "
    "me my of on or our so than that the their them then there these they this to was we were "
    "what when where which who whom why will with you your"
)
_STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())


def paragraphs(text: str) -> list[str]:
    """The text's paragraphs: blank-line blocks, long blocks cut at sentences (~600 chars)."""
    found: list[str] = []
    for block in _BLANK_LINES.split(text):
        block = block.strip()
        if not block:
            continue
        if len(block) <= 1200:
            found.append(block)
            continue
        chunk: list[str] = []
        size = 0
        for sentence in _SENTENCE_END.split(block):
            if chunk and size + len(sentence) > 600:
                found.append(" ".join(chunk).strip())
                chunk, size = [], 0
            if sentence:
                chunk.append(sentence)
                size += len(sentence) + 1
        if chunk:
            found.append(" ".join(chunk).strip())
    return [p for p in found if p]


def terms(text: str) -> list[str]:
    """The words BM25 compares: lower case, no stop words, a plural ``s`` stripped."""
    found = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.append(word)
    return found


def answer(text: str, question: str, context: bool) -> tuple[str, dict[str, object]]:
    """The passages most relevant to ``question``, in document order, and their ``meta``.

    Up to ``QUESTION_PASSAGES`` paragraphs scoring at least half the best score; with
    ``context``, the paragraph before and after each one; gaps marked ``[...]``.

    Raises:
        TargetError: the content is over ``QUESTION_MAX_CHARS`` characters or
            ``QUESTION_MAX_PARAGRAPHS`` paragraphs (status 422).
    """
    hint = "fetch a smaller page (one section or chapter), or use grep= to find exact lines"
    if len(text) > QUESTION_MAX_CHARS:
        raise TargetError(
            f"question reads at most {QUESTION_MAX_CHARS:,} characters; this content has "
            f"{len(text):,}",
            hint=hint,
            status=422,
        )
    paras = paragraphs(text)
    if len(paras) > QUESTION_MAX_PARAGRAPHS:
        raise TargetError(
            f"question reads at most {QUESTION_MAX_PARAGRAPHS:,} paragraphs; this content has "
            f"{len(paras):,}",
            hint=hint,
            status=422,
        )
    wanted = frozenset(list(dict.fromkeys(terms(question)))[:QUESTION_MAX_TERMS])
    n = len(paras)
    lengths = [0] * n
    counts: dict[int, Counter[str]] = {}  # paragraph -> its question words (when it has any)
    for i, para in enumerate(paras):
        words = terms(para)
        lengths[i] = len(words)
        hits = [w for w in words if w in wanted]
        if hits:
            counts[i] = Counter(hits)
    df: Counter[str] = Counter()
    for tf in counts.values():
        df.update(tf.keys())
    idf = {t: math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1) for t in df}
    avg = (sum(lengths) / n if n else 0.0) or 1.0
    scores = [0.0] * n
    for i, tf in counts.items():
        norm = _K1 * (1 - _B + _B * lengths[i] / avg)
        scores[i] = sum(idf[t] * f * (_K1 + 1) / (f + norm) for t, f in tf.items())
    top = max(scores, default=0.0)
    # Passages far below the best one only add noise: keep those within half of its score.
    best = sorted(
        (i for i in range(n) if scores[i] > 0 and scores[i] >= top / 2),
        key=lambda i: (-scores[i], i),
    )[:QUESTION_PASSAGES]
    around = 1 if context else 0
    keep = sorted({j for i in best for j in range(max(i - around, 0), min(i + around + 1, n))})
    out: list[str] = []
    for k, index in enumerate(keep):
        if k and index != keep[k - 1] + 1:
            out.append("[...]")
        out.append(paras[index])
    passages = [{"paragraph": i + 1, "score": round(scores[i], 3)} for i in sorted(best)]
    return "\n\n".join(out) + ("\n" if out else ""), {"passages": passages, "paragraphs": n}
