"""The translation table's reference rows and the target sentences' unigram entropy.

Measured on the demo's own translation data (``scripts/common/translation_data.py`` writes
it), on the same test sentences the models decode, with the same sacreBLEU
(:func:`scripts.common.fairseq_generate.sacre_bleu`):

- *copy*: each test source sentence, untouched, as its own translation. Program messages
  share names, options, numbers and loan words with their translation, so this is not zero.
- *trivial*: the same output for every sentence, the ``n`` most frequent words of the
  tokenised training targets (``n`` their median length in words), detokenised as a model's
  output is.
- the *unigram entropy* (bits per token) of the valid targets' BPE tokens and end-of-sentence
  tokens, the tokens fairseq's ``valid nll`` averages over, under the training targets'
  add-one smoothed unigram distribution (``scripts/demo/reference_summaries.py``): the
  trivial row's ``valid nll``.

The rows and the comparison sentences are ``scripts/demo/reference_rows.py``'s, which the
summarization table uses too.
"""

from __future__ import annotations

from pathlib import Path

from scripts.common.fairseq_generate import sacre_bleu
from scripts.common.translation_data import SRC, TGT
from scripts.demo.reference_rows import References
from scripts.demo.reference_summaries import median_length, trivial_summary, unigram_entropy
from scripts.recipes.lib.prepare_text import moses_detokenize, read_lines

COPY_KEY, TRIVIAL_KEY = "copy", "trivial"


def translation_labels(words: int) -> dict:
    """Table labels of the two reference rows, for outputs of ``words`` words."""
    return {COPY_KEY: "reference: the source sentence copied (copy)",
            TRIVIAL_KEY: f"reference: the {words} most frequent target words (trivial)"}


def measure_translation_references(work: Path) -> References:
    """From ``work/raw/test.{de,en}``, ``work/prep/tok.train.en``,
    ``work/prep/sentences/{train,valid}.en`` and the data bin's dictionary."""
    references = read_lines(work / "raw" / f"test.{TGT}")
    train_targets = read_lines(work / "prep" / f"tok.train.{TGT}")
    words = median_length(train_targets)
    trivial = moses_detokenize([trivial_summary(train_targets, words)], TGT)[0]
    # fairseq's dictionary also holds <s>, <pad>, </s> and <unk>, not listed in the file
    size = len(read_lines(work / "bin" / "sentences" / f"dict.{TGT}.txt")) + 4
    pieces = work / "prep" / "sentences"
    return References(
        labels=translation_labels(words),
        scores={COPY_KEY: {"BLEU": sacre_bleu(read_lines(work / "raw" / f"test.{SRC}"),
                                              references)},
                TRIVIAL_KEY: {"BLEU": sacre_bleu([trivial] * len(references), references)}},
        entropy_bits=unigram_entropy(read_lines(pieces / f"train.{TGT}"),
                                     read_lines(pieces / f"valid.{TGT}"), size),
        entropy_row=TRIVIAL_KEY, metric="BLEU", targets="the target sentences",
        floor_rows=(COPY_KEY, TRIVIAL_KEY))
