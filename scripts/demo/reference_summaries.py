"""What "learned" means for the demo's summaries: two outputs that read no model, and the
unigram floor of the cross-entropy.

- The *trivial* summary is the same for every page: the ``n`` most frequent words of the
  training summaries, most frequent first, ``n`` the median length of a training summary in
  words. A model that emits frequent words scores about this ROUGE.
- The *lead* summary of a page is its first ``n`` words (of the input the models see): the
  classic extractive baseline of news summarization.
- The *unigram entropy* of the summaries is the cross-entropy, in bits per token, of the
  valid summaries' tokens (pieces and the end-of-sentence token, the tokens fairseq's
  ``valid nll`` averages over) under the training summaries' unigram distribution with
  add-one smoothing over the dictionary. It is the valid nll of the best model that looks at
  neither the page nor the summary so far; a model's valid nll well below it has learnt
  something about the page or the summary's order.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Dict, Iterable, List, Sequence

from scripts.recipes.lib.score import rouge_scores

END_OF_SENTENCE = "</s>"


def median_length(lines: Sequence[str]) -> int:
    """The median number of words of ``lines`` (the upper median), at least 1."""
    lengths = sorted(len(line.split()) for line in lines)
    return max(1, lengths[len(lengths) // 2]) if lengths else 1


def trivial_summary(train_summaries: Sequence[str], length: int) -> str:
    """The ``length`` most frequent words of the training summaries, most frequent first
    (ties in order of first appearance, so the output does not depend on hashing)."""
    counts = Counter(word for line in train_summaries for word in line.split())
    return " ".join(word for word, _ in counts.most_common(length))


def lead_summary(document: str, length: int) -> str:
    """The first ``length`` words of ``document``."""
    return " ".join(document.split()[:length])


def unigram_entropy(train_targets: Iterable[str], valid_targets: Iterable[str],
                    vocabulary_size: int) -> float:
    """Cross-entropy (bits per token) of ``valid_targets`` under the add-one smoothed unigram
    distribution of ``train_targets``; every line also ends with the end-of-sentence token.

    With counts ``c(w)`` over ``N`` training tokens and ``V`` dictionary entries,
    ``p(w) = (c(w) + 1) / (N + V)`` and the result is ``-mean_t log2 p(w_t)`` over the valid
    tokens. ``vocabulary_size`` is raised to the number of distinct tokens seen, so that the
    distribution always sums to at most one.
    """
    counts: Counter = Counter()
    for line in train_targets:
        counts.update(line.split())
        counts[END_OF_SENTENCE] += 1
    valid = [token for line in valid_targets for token in (*line.split(), END_OF_SENTENCE)]
    if not valid:
        return math.nan
    size = max(vocabulary_size, len(counts.keys() | set(valid)))
    total = sum(counts.values()) + size
    return -sum(math.log2((counts[token] + 1) / total) for token in valid) / len(valid)


def reference_outputs(train_summaries: Sequence[str], test_documents: Sequence[str]
                      ) -> Dict[str, List[str]]:
    """The trivial and the lead output, one line per test page."""
    length = median_length(train_summaries)
    return {"trivial": [trivial_summary(train_summaries, length)] * len(test_documents),
            "lead": [lead_summary(document, length) for document in test_documents]}


def reference_scores(train_summaries: Sequence[str], test_documents: Sequence[str],
                     test_references: Sequence[str]) -> Dict[str, Dict[str, float]]:
    """ROUGE-1/2/L of the trivial and the lead output on the test pages:
    ``{"trivial": scores, "lead": scores}`` with the keys of
    :func:`scripts.recipes.lib.score.rouge_scores`."""
    outputs = reference_outputs(train_summaries, test_documents)
    return {name: rouge_scores(lines, list(test_references)) for name, lines in outputs.items()}
