"""What a demo model must beat, and the sentences that compare two models: one piece for both
of the report's tables (translation and summarization).

A table's *reference rows* read no model (the translation's source copied as the output, the
most frequent target words, a page's first words, ...); the *unigram entropy* of the targets
is the valid nll of the best model that reads neither the input nor the output so far
(``scripts/demo/reference_summaries.py`` has the formula). A model has **learned** when

- it trained its whole update budget (a model the safety cap stopped is "not finished"),
- its valid nll is at least :data:`LEARNED_MARGIN_BITS` below the unigram entropy, and
- its score (BLEU, ROUGE-1) is above that of every reference row that stands for "learnt
  nothing" (the translation's copy and trivial rows; the summaries' trivial row, not the
  lead, a strong extractive baseline of its own).

A comparison of two models never says who is ahead. Where a model did not learn, it says that
the comparison is not meaningful, and why: ranking two models that have learnt nothing ranks
noise. Where both learned, it gives their figures and says why they still do not compare the
methods: the demo trains one seed of each, a fixed budget at one shared rate, and its models
are still learning when it ends (:func:`late_drop`, measured on each training curve);
docs/reproduction.md compares models trained to a plateau, each at its own rate, over seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Tuple

# A model has learnt from its inputs when its valid nll is this far below the unigram entropy.
LEARNED_MARGIN_BITS = 2.0
# The ``updates`` cell of a model the safety cap stopped before its update budget.
NOT_FINISHED = "not finished"
# A model's key for :func:`late_drop` of its training curve, beside its table cells.
LATE_DROP = "late nll drop"


def late_drop(losses: Sequence[Tuple[float, float]]) -> float:
    """How much a training curve ``[(update, nll bits), ...]`` was still falling at its end:
    the mean nll of its points in the tenth of the updates just before the last quarter
    (65% to 75% of the last update) minus the mean of those in the last tenth (90% to 100%);
    NaN where a window holds no point."""
    if not losses:
        return math.nan
    last = max(update for update, _ in losses)

    def mean(low: float, high: float) -> float:
        window = [nll for update, nll in losses if low * last <= update <= high * last]
        return sum(window) / len(window) if window else math.nan

    return mean(0.65, 0.75) - mean(0.9, 1.0)


def number(cell: object) -> float:
    """A table cell as a float (nan for "-" and text)."""
    try:
        return float(cell)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _below(gap: float) -> str:
    """``gap`` bits below the unigram entropy, said the right way round when negative."""
    return f"{gap:.2f} bits below" if gap >= 0 else f"{-gap:.2f} bits above"


def updates_cell(updates: int, finished: bool) -> int | str:
    """The ``updates`` cell: the count, marked when the run did not finish its budget."""
    return updates if finished else f"{updates} ({NOT_FINISHED})"


def finished(model: Mapping[str, object]) -> bool:
    """Whether a model row (``{column: cell}``) trained its whole update budget."""
    return NOT_FINISHED not in str(model.get("updates", ""))


@dataclass
class References:
    """A table's reference rows and the unigram entropy of its targets."""

    labels: Dict[str, str]               # row key -> table label, in table order
    scores: Dict[str, Dict[str, float]]  # row key -> {table column: value}
    entropy_bits: float                  # unigram entropy of the valid targets, bits/token
    entropy_row: str                     # the row whose ``valid nll`` is the unigram entropy
    metric: str                          # the score a model must beat: "BLEU", "ROUGE-1"
    targets: str                         # what the entropy is of: "the summaries"
    floor_rows: Tuple[str, ...]          # the rows whose score a model that learned beats

    def rows(self, headers: Sequence[str]) -> List[list]:
        """The reference rows of a table with ``headers`` ("-" where nothing applies).

        The ``entropy_row``'s ``valid nll`` is the unigram entropy: the valid nll of the
        model that always predicts the targets' unigram distribution, whose best output the
        most-frequent-words row is.
        """
        rows = []
        for key, label in self.labels.items():
            cells: Dict[str, object] = dict.fromkeys(headers, "-")
            cells[headers[0]] = label
            for column, value in self.scores[key].items():
                if column in cells:
                    cells[column] = value
            if key == self.entropy_row and "valid nll" in cells:
                cells["valid nll"] = round(self.entropy_bits, 3)
            rows.append([cells[h] for h in headers])
        return rows

    def floor(self) -> float:
        """The best score of the ``floor_rows``: what a model that learned beats."""
        return max(self.scores[key][self.metric] for key in self.floor_rows)

    def floor_label(self) -> str:
        """Whose score :meth:`floor` is, for a sentence: "the trivial row's"."""
        names = list(self.floor_rows)  # the keys name the rows: "copy", "trivial"
        return "the " + " and ".join(names) + (" rows'" if len(names) > 1 else " row's")

    def gap(self, model: Mapping[str, object]) -> float:
        """How far (bits) the model's valid nll is below the unigram entropy."""
        return self.entropy_bits - number(model.get("valid nll"))

    def why_not_learned(self, model: Mapping[str, object]) -> str:
        """"" when the model learned, else the reason it did not, as a clause."""
        label = model["label"]
        if not finished(model):
            return (f"{label} is {NOT_FINISHED} (the safety cap stopped it after "
                    f"{str(model.get('updates')).split()[0]} updates)")
        gap, score = self.gap(model), number(model.get(self.metric))
        if not gap >= LEARNED_MARGIN_BITS:
            return (f"{label}'s valid nll is {_below(gap)} the unigram entropy "
                    f"({LEARNED_MARGIN_BITS:g} below needed)")
        if not score > self.floor():
            return (f"{label}'s {self.metric} {score:.2f} is not above "
                    f"{self.floor_label()} {self.floor():.2f}")
        return ""

    def entropy_line(self, model: Mapping[str, object]) -> str:
        """The unigram entropy and one model's valid nll against it, in a sentence."""
        nll, gap = number(model.get("valid nll")), self.gap(model)
        return (f"Unigram entropy of {self.targets}: {self.entropy_bits:.2f} bits/token; "
                f"{model['label']}: valid nll {nll:.2f} bits, {_below(gap)} it "
                + ("(it has learnt from its inputs, not only word frequencies)."
                   if gap >= LEARNED_MARGIN_BITS else
                   f"(less than the {LEARNED_MARGIN_BITS:g} bits this demo asks of a model "
                   "that has learnt from its inputs)."))

    def comparison(self, first: Mapping[str, object], second: Mapping[str, object],
                   detail: str = "") -> str:
        """One sentence: whether both models learned; if both did, their figures (``detail``
        appended) and why they still do not compare the methods, with how much each was
        still learning (:data:`LATE_DROP`); else "not meaningful" and why."""
        head = f"{first['label']} against {second['label']}: "
        reasons = [r for r in (self.why_not_learned(first), self.why_not_learned(second)) if r]
        if reasons:
            return (head + "**not meaningful**: " + "; ".join(reasons)
                    + f" (learned: the whole update budget, valid nll {LEARNED_MARGIN_BITS:g}"
                    f" bits below the unigram entropy of {self.entropy_bits:.2f}, "
                    f"{self.metric} above {self.floor():.2f}).")
        a, b = number(first.get(self.metric)), number(second.get(self.metric))
        drops = [number(model.get(LATE_DROP)) for model in (first, second)]
        fall = (" and ".join(f"{drop:.2f}" for drop in drops) + " bits"
                if all(math.isfinite(drop) for drop in drops) else "not recorded")
        return (head + f"both learned ({self.metric} {a:.2f} and {b:.2f}, above "
                f"{self.floor_label()} {self.floor():.2f}; valid nll {self.gap(first):.2f} and "
                f"{self.gap(second):.2f} bits below the unigram entropy"
                + (f"; {detail}" if detail else "") + "); **not a comparison of the "
                "methods**: one seed each, the same fixed budget at one shared rate, and the "
                f"fall of each training nll over the last quarter of its updates: {fall} "
                "(docs/reproduction.md compares such models trained to a plateau, each at its "
                "own rate, over 3 seeds).")
