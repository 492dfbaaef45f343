"""One budget a table: the rows its claims compare train the same number of updates, U, and
are decoded the same way.

A table whose settings at a scale hold ``budget_updates`` U trains each of its cells at the
row's chosen rate (each row keeps its own rate from the grid, which screens rates as before)
for exactly U updates: ``--max-update U``, no patience and no epoch cap, validation (and a
checkpoint) every half epoch as in the plateau runs, and the best validated checkpoint
decoded, the same rule for every row. Where a model is judged at its own plateau, the update
at which a seed stopped decides its figure as much as the model does (a row that trained
longer reads better); at one U the seeds of two rows differ by their models only, and the same
seed gives them the same data order, so the claims can test them in pairs
(:mod:`~scripts.reproduce.direction`).

U is chosen from the pilot seeds so that the valid nll has stopped falling there. A seed
whose valid nll still falls over its last :data:`TREND_VALIDATIONS` validations at U (the
least-squares trend test of :func:`~scripts.reproduce.direction.falling`, one-sided at 5%) is
*still learning at U*, and so are the claims on its row (:mod:`~scripts.reproduce.claims`).

The grid cells keep their keys (the budget is not one of their settings); a budgeted cell is
a new cell, with a record of its own (``...-budget<U>.json``). A row of another table that
starts from (or is) one of this table's models starts from the model its records hold,
trained to its own plateau (:func:`without_budget`): the budget is this table's protocol for
its own claims.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Dict, Mapping, Sequence

from scripts.reproduce.direction import Trend, falling

BUDGET = "budget_updates"
# 16, not the stop rule's 8: over 8 validations (4 epochs) a slow fall hides in the noise
TREND_VALIDATIONS = 16
ALPHA = 0.05


def budget_of(settings: Mapping[str, Any]) -> int | None:
    """The table's budget U in updates at these settings, None where it has none."""
    value = settings.get(BUDGET)
    return int(value) if value else None


def at_budget(settings: Mapping[str, Any], search: bool = False) -> Dict[str, Any]:
    """The settings a cell trains with under its table's budget: a grid cell (``search``)
    and the cells of a table without one as before (the key left out, so their keys stay);
    a cell at its row's rate exactly U updates, with no patience (0: fairseq never stops it
    early) and no epoch cap (0), its best validated checkpoint decoded."""
    updates = budget_of(settings)
    found = {key: value for key, value in settings.items() if key != BUDGET}
    if updates is None or search:
        return found
    return {**found, BUDGET: updates, "max_update": updates, "max_epoch": 0, "patience": 0}


def without_budget(spec: Any) -> Any:
    """``spec`` (a TableSpec) with no budget at any scale: another table's rows start from
    its models as its records hold them."""
    return replace(spec, **{name: {k: v for k, v in getattr(spec, name).items() if k != BUDGET}
                            for name in ("toy", "tiny", "paper_settings")})


def trend_at(curve: Sequence[Sequence[float]] | None) -> Trend | None:
    """The trend test over the last :data:`TREND_VALIDATIONS` finite validations of
    ``curve`` (``[[update, loss], ...]``), None for a shorter curve."""
    points = [p for p in curve or () if math.isfinite(p[1])][-TREND_VALIDATIONS:]
    return falling(points) if len(points) == TREND_VALIDATIONS else None


def still_falling_at(curve: Sequence[Sequence[float]] | None) -> bool:
    """Whether the valid loss still falls over the last :data:`TREND_VALIDATIONS`
    validations of ``curve`` (one-sided, :data:`ALPHA`); a curve too short to test counts as
    still falling (it cannot show a plateau)."""
    found = trend_at(curve)
    return found is None or found.p < ALPHA
