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
    """One figure of a table, read from a cell's ``result.json``. ``learned``: what a
    trained model learnt (a verdict on it needs models that finished learning and learnt
    something); False for a cost (time per update, decoding time) or an untrained
    operator's figure. ``alone``: a time a cell's timed step measures (a decoding), compared
    only where that step ran with the call's other steps paused (a record's
    ``timed_alone``)."""

    key: str
    label: str
    higher_is_better: bool = True
    digits: int = 2
    learned: bool = True
    alone: bool = False

    def unusable(self, result: Mapping[str, Any]) -> str | None:
        """Why a cell's finished ``result`` cannot be compared on this figure: ``"missing"``
        (it finished before the figure was measured), ``"beside"`` (a time measured alone
        whose timed step ran beside other steps: it finished before timed steps ran alone);
        else None."""
        if self.key not in result["figures"]:
            return "missing"
        if self.alone and not result.get("timed_alone"):
            return "beside"
        return None


@dataclass(frozen=True)
class Row:
    """One model (or configuration) of a table.

    ``flags`` go to ``fairseq-train`` (or to the wrapped script) on top of the table's;
    ``parent`` names the row whose model this row starts from (the same seed): a row of the
    same table, or ``"TABLE:ROW"``, a row of another table (that table's cell, at its chosen
    rate, with its settings, data and key: the cell ``python -m scripts.reproduce TABLE --rows
    ROW`` plans, trained and recorded as that table trains it), unless a scale's settings say
    otherwise (``use_parents``, ``parents``: :func:`~scripts.reproduce.cell_plan.parent_of`);
    ``same_as``, ``"TABLE:ROW"``, makes the row that very model (the same flags): its cells
    are that table's cells, planned and trained as a ``parent`` is, and this table only
    measures them (what its settings ask for beyond training and decoding), into its own
    folders and records; ``hidden`` rows are trained only as starting points of the rows a
    scale runs, and not shown; ``point`` holds the x of a curve (e.g. the document length);
    ``paper`` the paper's figures for this row; ``recipe_model``, ``recipe_env`` and
    ``recipe_flags`` the paper-scale recipe's MODEL, variables and extra fairseq-train flags
    (the MODEL carries the model itself).
    """

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
    """A claim of the paper: row ``better`` beats row ``worse`` on ``metric`` (superiority),
    or, with a ``margin`` in the metric's units, is not behind it by more than the margin
    (the paper's "matches", "comparable", ">=": non-inferiority; the table's notes say why
    that margin)."""

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
    # the fairseq validation loss every cell of the table stops on and keeps its best
    # checkpoint by, where not its kind's (``kinds.stopping_loss``): e.g. ``loss``, each row's
    # own criterion, for rows that train different criteria
    validation_loss: str | None = None
    # whether its cells stop by the valid-loss patience rule (:mod:`~scripts.reproduce.stop_rule`),
    # whose trend test then reads their (update, loss) curves: False for the synthetic studies,
    # which stop on their score (``synthetic_study.Plateau``) and record (step, loss, score)
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
        """The kind's settings at ``scale`` (``toy``, ``tiny`` = toy with test overrides,
        ``paper``)."""
        if scale == "paper":
            return dict(self.paper_settings)
        merged = dict(self.toy)
        if scale == "tiny":
            merged.update(self.tiny)
        return merged


def split_parent(parent: str) -> Tuple[str | None, str]:
    """``(table, row)`` of a row's ``parent``; table None for a row of the same table."""
    table, _, row = parent.rpartition(":")
    return table or None, row


def stale_words(row: Row, stale: str) -> str:
    """Why a cell of ``row`` is stale, as what it did (its subject left to the caller, one
    seed or several): the cell ``stale`` it starts from (or, ``same_as``, measures) was trained
    on after it finished. Here, not in the runner, so the claims can say it too."""
    verb = "measured" if row.same_as else "started from"
    return f"{verb} an older model of {stale}, trained on after it"


def family(row: Row) -> str:
    """The curve a row belongs to in a plot: its label without the point (e.g. 'ReLUFormer')."""
    return row.label.split(" @ ")[0]


def shown_rows(spec: TableSpec) -> Sequence[Row]:
    return [row for row in spec.rows if not row.hidden]
