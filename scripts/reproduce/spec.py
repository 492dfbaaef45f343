"""What a reproduction table is: its rows, metrics, the paper's claims and its settings.

A :class:`TableSpec` is data only. Its ``kind`` names the module that turns a row at a seed
into commands and reads figures back from their logs (:mod:`scripts.reproduce.kinds`); the
runner, the cache and the collector are the same for every table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Sequence, Tuple


@dataclass(frozen=True)
class Metric:
    """One figure of a table, read from a cell's ``result.json``. ``learned``: what a model
    learnt (False for a cost); ``alone``: a time compared only where its step ran alone."""

    key: str
    label: str
    higher_is_better: bool = True
    digits: int = 2
    learned: bool = True
    alone: bool = False

    def unusable(self, result: Mapping[str, Any]) -> str | None:
        """Why ``result`` cannot be compared on this figure: ``"missing"`` (finished before
        it was measured), ``"beside"`` (timed beside other steps), else None."""
        if self.key not in result["figures"]:
            return "missing"
        if self.alone and not result.get("timed_alone"):
            return "beside"
        return None


@dataclass(frozen=True)
class Row:
    """One model of a table. ``flags`` go to ``fairseq-train`` on top of the table's;
    ``parent`` names the row (``"ROW"`` or another table's ``"TABLE:ROW"``) whose model of the
    same seed this row starts from; ``same_as`` makes the row that table's very model, which
    this table only measures; ``hidden`` rows are only starting points; ``point`` is its x on
    a curve; ``paper`` the paper's figures; ``recipe_*`` the paper-scale recipe's MODEL,
    variables and extra flags."""

    key: str
    label: str
    flags: Tuple[str, ...] = ()
    parent: str | None = None
    hidden: bool = False
    point: Mapping[str, Any] = field(default_factory=dict)
    paper: Mapping[str, Any] = field(default_factory=dict)
    recipe_model: str = ""
    recipe_env: Mapping[str, str] = field(default_factory=dict)
    recipe_flags: Tuple[str, ...] = ()
    generate_flags: Tuple[str, ...] = ()
    same_as: str | None = None


@dataclass(frozen=True)
class Comparison:
    """A claim of the paper: row ``better`` beats row ``worse`` on ``metric``, or with a
    ``margin`` (the metric's units) is not behind it by more (non-inferiority)."""

    better: str
    worse: str
    metric: str
    claim: str
    margin: float | None = None


@dataclass(frozen=True)
class Deviation:
    """A setting where the toy scale departs from the paper, and why."""

    setting: str
    paper: str
    ours: str
    why: str


@dataclass(frozen=True)
class TableSpec:
    """One table or figure of one paper."""

    name: str
    title: str
    paper: str                      # "ReLUFormer, Table 6"
    claim: str                      # the paper's headline, in one sentence
    kind: str                       # module of scripts.reproduce.kinds
    metrics: Tuple[Metric, ...]
    rows: Tuple[Row, ...]
    comparisons: Tuple[Comparison, ...] = ()
    toy: Mapping[str, Any] = field(default_factory=dict)    # the kind's toy settings
    tiny: Mapping[str, Any] = field(default_factory=dict)   # overrides for the tests
    paper_settings: Mapping[str, Any] = field(default_factory=dict)
    deviations: Tuple[Deviation, ...] = ()
    # (x, metric key): x a point key (a curve per row family) or "metric:KEY" (one point per
    # row, e.g. ROUGE against a cost)
    plot: Tuple[str, str] | None = None
    notes: str = ""
    # the validation loss the cells stop on, where not their kind's (``kinds.stopping_loss``)
    validation_loss: str | None = None
    # whether the cells stop by the valid-loss rule (stop_rule.py): not the synthetic studies
    valid_loss_stop: bool = True

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(f"{self.name} has no row {key!r}")

    def metric(self, key: str) -> Metric:
        for metric in self.metrics:
            if metric.key == key:
                return metric
        raise KeyError(f"{self.name} has no metric {key!r}")

    def settings(self, scale: str) -> Dict[str, Any]:
        """The kind's settings at ``scale`` (``toy``, ``tiny`` or ``paper``)."""
        if scale == "paper":
            return dict(self.paper_settings)
        return {**self.toy, **(self.tiny if scale == "tiny" else {})}


def split_parent(parent: str) -> Tuple[str | None, str]:
    """``(table, row)`` of a row's ``parent``; table None for a row of the same table."""
    table, _, row = parent.rpartition(":")
    return table or None, row


def stale_words(row: Row, stale: str) -> str:
    """Why a cell of ``row`` is stale: the cell ``stale`` it starts from (or measures) was
    trained on after it finished."""
    verb = "measured" if row.same_as else "started from"
    return f"{verb} an older model of {stale}, trained on after it"


def family(row: Row) -> str:
    """The curve a row belongs to in a plot: its label without the point."""
    return row.label.split(" @ ")[0]


def shown_rows(spec: TableSpec) -> Sequence[Row]:
    return [row for row in spec.rows if not row.hidden]
