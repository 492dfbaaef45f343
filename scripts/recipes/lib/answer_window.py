"""The passage chunk that holds the answer: question generation's input truncation.

The sparse-softmax paper (following UniLM's question generation) truncates the input to 464
tokens by choosing the passage chunk that holds the answer, instead of cutting the tail,
which can cut the answer off. Here the passage is cut into consecutive chunks of ``size``
tokens from its start; the chunk holding the answer's first token is kept, moved back just
enough to hold the answer's last token too when the answer crosses the chunk's end.
"""

from __future__ import annotations

from typing import Sequence

PASSAGE_TOKENS = 464


def locate_answer(passage: Sequence[str], answer: Sequence[str], guess: int) -> int:
    """Index of the answer's tokens in ``passage``: the occurrence nearest ``guess`` (the
    token count of the passage before the answer's character offset), else ``guess``.

    The guess can be off by a token or two where tokenising the prefix alone splits its last
    word differently; a sub-word answer ("1990" inside "1990s") is not a token run at all.
    """
    m = len(answer)
    if m == 0:
        return max(0, min(guess, len(passage)))
    starts = [i for i in range(len(passage) - m + 1) if list(passage[i:i + m]) == list(answer)]
    if not starts:
        return max(0, min(guess, len(passage) - 1)) if passage else 0
    return min(starts, key=lambda i: (abs(i - guess), i))


def answer_chunk(length: int, start: int, end: int, size: int = PASSAGE_TOKENS
                 ) -> tuple[int, int]:
    """``(lo, hi)``: the chunk of at most ``size`` tokens of a passage of ``length`` tokens
    that holds tokens ``start .. end - 1`` (the answer). ``size <= 0`` keeps everything.

    The chunks are ``[k * size, (k + 1) * size)``; the one holding ``start`` is chosen, and
    moved back to end at ``end`` when the answer runs past it (an answer longer than
    ``size`` keeps its first ``size`` tokens).
    """
    if size <= 0 or length <= size:
        return 0, length
    start = max(0, min(start, length - 1))
    end = max(start + 1, min(end, length))
    lo = (start // size) * size
    if end > lo + size:
        lo = min(start, end - size)
    lo = max(0, min(lo, length - size))
    return lo, lo + size
