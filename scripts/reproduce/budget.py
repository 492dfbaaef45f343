"""One budget a table: the rows its claims compare train the same number of updates, U, and
are decoded the same way.

A table whose settings hold ``budget_updates`` U trains each cell at its row's chosen rate
(the grid screens rates as before) for exactly U updates: no patience, no epoch cap,
validation every half epoch, the best validated checkpoint decoded. At one U two rows' seeds
differ by their models only (at their own plateaus the stopping update decides a figure as
much as the model), so the claims can test them in pairs. A row whose valid loss, the mean
of its seeds' curves, still falls over its last :data:`TREND_VALIDATIONS` validations at U is
*still learning at U*: one test a row, so that more seeds do not make a chance fall in one of
them more likely (each seed tested alone at 5%, 10 flat seeds would read falling in 40% of
rows). The test reads the row's first :data:`PILOT_SEEDS` seeds, the pilot that sets U: the
seeds added for power train at that U and do not test it again, for the mean of more seeds is
less noisy and ever smaller slopes would read falling, so that adding seeds would never settle
U. Where a pilot row still falls at U, U doubles (Table 4: 20,000, 40,000, then 80,000) and
every seed continues from its checkpoint at U; fairseq's inverse-square-root schedule does not
depend on U, so a cell continued to 2U is the cell trained to 2U in one go.

The grid cells keep their keys; a budgeted cell is a new cell (``...-budget<U>.json``). Other
tables start from this table's models as trained to their own plateaus (:func:`with_budget`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Sequence

from scripts.reproduce.direction import Trend
from scripts.reproduce.stop_rule import ALPHA, last_trend

BUDGET = "budget_updates"
# 16, not the stop rule's 8: over 8 validations (4 epochs) a slow fall hides in the noise
TREND_VALIDATIONS = 16
# the seeds whose mean curve tests a row at U (seeds 1 to 3)
PILOT_SEEDS = 3


def budget_of(settings: Mapping[str, Any]) -> int | None:
    """The table's budget U in updates at these settings, None where it has none."""
    value = settings.get(BUDGET)
    return int(value) if value else None


def at_budget(settings: Mapping[str, Any], search: bool = False) -> Dict[str, Any]:
    """The settings a cell trains with: a grid cell (``search``) or a cell of a table without
    a budget without the key (their keys stay); else exactly U updates, no patience and no
    epoch cap (0)."""
    updates = budget_of(settings)
    found = {key: value for key, value in settings.items() if key != BUDGET}
    if updates is None or search:
        return found
    return {**found, BUDGET: updates, "max_update": updates, "max_epoch": 0, "patience": 0}


def with_budget(spec: Any, updates: int | None = None) -> Any:
    """``spec`` (a TableSpec) with the budget ``updates`` where a scale has one, or with none
    at any scale (None): another budget's records, or the models as trained to a plateau."""
    def settings(name: str) -> Dict[str, Any]:
        found = {k: v for k, v in getattr(spec, name).items() if k != BUDGET}
        return {**found, BUDGET: updates} if updates and getattr(spec, name).get(BUDGET) \
            else found
    return replace(spec, **{name: settings(name) for name in ("toy", "tiny", "paper_settings")})


def mean_curve(curves: Sequence[Sequence[Sequence[float]] | None]) -> List[List[float]]:
    """``[[update, mean valid loss], ...]`` over the updates where every one of ``curves``
    has a finite loss (the seeds of a row at one budget validate at the same updates)."""
    losses = [{int(update): loss for update, loss in curve or () if math.isfinite(loss)}
              for curve in curves]
    shared = sorted(set.intersection(*map(set, losses))) if losses else []
    return [[update, statistics.fmean(seed[update] for seed in losses)] for update in shared]


def row_trend(curves: Sequence[Sequence[Sequence[float]] | None]) -> Trend | None:
    """The trend test on the last :data:`TREND_VALIDATIONS` points of the seeds'
    :func:`mean_curve`, None where it is too short to test."""
    return last_trend(mean_curve(curves), TREND_VALIDATIONS)


def still_falling_at(found: Trend | None) -> bool:
    """Whether a row's :func:`row_trend` still falls; one too short to test counts as
    falling (it shows no plateau)."""
    return found is None or found.p < ALPHA
