"""The summarization part of the demo report: reference rows, the unigram floor, findings.

``SummaryReferences.measure`` reads the prepared summary data (``scripts/demo/summary_data.py``
writes it) and computes, on the same test pages the models decode, the ROUGE of the trivial
and the lead output and the summaries' unigram entropy
(``scripts/demo/reference_summaries.py``). Its rows go under the models' rows in the table;
``findings`` says in words what the table shows, and says that the comparison is not
meaningful when no model beats the trivial output; the rows and the "learned" test are
``scripts/demo/reference_rows.py``'s, which the translation table uses too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

from scripts.demo.reference_rows import References, finished, number
from scripts.demo.reference_summaries import median_length, reference_scores, unigram_entropy
from scripts.demo.summary_data import TARGET
from scripts.recipes.lib.prepare_text import read_lines, sentencepiece_decode

TRIVIAL_KEY, LEAD_KEY = "trivial", "lead"
ROUGE_COLUMNS = (("ROUGE-1", "rouge1"), ("ROUGE-2", "rouge2"), ("ROUGE-L", "rougeL"))
# Pyramidion "matches" the vanilla encoder when its ROUGE-1 is within this many points.
PARITY_POINTS = 2.0


def reference_labels(words: int) -> Dict[str, str]:
    """Table labels of the two reference rows, for summaries of ``words`` words."""
    return {TRIVIAL_KEY: f"reference: the {words} most frequent summary words (trivial)",
            LEAD_KEY: f"reference: the first {words} words of the input (lead)"}


@dataclass
class SummaryReferences:
    """What a model must beat, measured on the demo's own summary data."""

    words: int                       # length of the reference outputs, in words
    entropy_bits: float              # unigram entropy of the valid summaries, bits per token
    scores: Dict[str, Dict[str, float]]  # "trivial"/"lead" -> rouge1/rouge2/rougeL

    @classmethod
    def measure(cls, prep: Path, dictionary: Path) -> SummaryReferences:
        """From ``prep/{train,valid,test}.{sum,reference,doc}``, ``prep/spm.model`` and the
        target dictionary fairseq-preprocess wrote (its size smooths the unigram model)."""
        train_references = read_lines(prep / "train.reference")
        # the inputs the models see, pieces joined back into words
        documents = sentencepiece_decode(read_lines(prep / "test.doc"), prep / "spm.model")
        # fairseq's dictionary also holds <s>, <pad>, </s> and <unk>, not listed in the file
        size = len(read_lines(dictionary)) + 4
        return cls(words=median_length(train_references),
                   entropy_bits=unigram_entropy(read_lines(prep / "train.sum"),
                                                read_lines(prep / "valid.sum"), size),
                   scores=reference_scores(train_references, documents,
                                           read_lines(prep / "test.reference")))

    @classmethod
    def in_work(cls, work: Path) -> SummaryReferences:
        """:meth:`measure` on the demo's work folder (``prep/summaries``, ``bin/summaries``)."""
        return cls.measure(work / "prep" / "summaries",
                           work / "bin" / "summaries" / f"dict.{TARGET}.txt")

    @property
    def table(self) -> References:
        """The reference rows and the comparison sentences, shared with the translation
        table (``scripts/demo/reference_rows.py``)."""
        labels = reference_labels(self.words)
        return References(
            labels={key: labels[key] for key in (TRIVIAL_KEY, LEAD_KEY)},
            scores={key: {column: self.scores[key][name] for column, name in ROUGE_COLUMNS}
                    for key in (TRIVIAL_KEY, LEAD_KEY)},
            entropy_bits=self.entropy_bits, entropy_row=TRIVIAL_KEY, metric="ROUGE-1",
            targets="the summaries", floor_rows=(TRIVIAL_KEY,))

    def rows(self, headers: Sequence[str]) -> List[list]:
        """The two reference rows of a table with ``headers`` ("-" where nothing applies);
        the trivial row's ``valid nll`` is the unigram entropy."""
        return self.table.rows(headers)

    def findings(self, models: Sequence[Dict[str, object]]) -> List[str]:
        """Sentences on the models' rows against the references.

        ``models`` are the model rows as ``{column: cell}`` in table order, the vanilla
        encoder first and the Pyramidion last, with ``label``, ``updates``, ``valid nll``,
        ``ROUGE-1`` and ``train speed``. A model the safety cap stopped is left out of every
        comparison.
        """
        if not models:
            return []
        table = self.table
        trivial = self.scores[TRIVIAL_KEY]["rouge1"]
        vanilla, last = models[0], models[-1]
        lines = [table.entropy_line(vanilla)]
        beating = [m for m in models if finished(m) and number(m.get("ROUGE-1")) > trivial]
        if not beating:
            lines.append(
                f"**The comparison is not meaningful at this budget**: no finished model's "
                f"ROUGE-1 beats the trivial output's {trivial:.2f}, so the ROUGE columns "
                "measure which frequent words each model settled on, not which summarises "
                "better. The speed columns are this run's measurements, not a ranking.")
            return lines
        lines.append("ROUGE-1 above the trivial output's "
                     f"{trivial:.2f}: " + ", ".join(str(m["label"]) for m in beating)
                     + "; lead output: " f"{self.scores[LEAD_KEY]['rouge1']:.2f}.")
        if last is not vanilla:
            delta = number(last.get("ROUGE-1")) - number(vanilla.get("ROUGE-1"))
            verdict = "within" if abs(delta) <= PARITY_POINTS else "not within"
            lines.append(table.comparison(
                last, vanilla,
                f"ROUGE-1 {delta:+.2f} points ({verdict} {PARITY_POINTS:g} points of each "
                f"other), training {number(last.get('train speed')):.2f}x the vanilla speed "
                "per update"))
        return lines
