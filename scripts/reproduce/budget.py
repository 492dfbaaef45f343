"""One budget a table: the rows its claims compare train the same number of updates, U, and
are decoded the same way.

A table whose settings hold ``budget_updates`` U trains each cell at its row's chosen rate
(the grid screens rates as before) for exactly U updates: no patience, no epoch cap,
validation every half epoch, the best validated checkpoint decoded. At one U two rows' seeds
differ by their models only (at their own plateaus the stopping update decides a figure as
much as the model), so the claims can test them in pairs. A seed whose valid loss still falls
over its last :data:`TREND_VALIDATIONS` validations at U is *still learning at U*.

The grid cells keep their keys; a budgeted cell is a new cell (``...-budget<U>.json``). Other
tables start from this table's models as trained to their own plateaus (:func:`without_budget`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Mapping, Sequence

from scripts.reproduce.stop_rule import last_trend

BUDGET = "budget_updates"
# 16, not the stop rule's 8: over 8 validations (4 epochs) a slow fall hides in the noise
TREND_VALIDATIONS = 16
ALPHA = 0.05


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


def without_budget(spec: Any) -> Any:
    """``spec`` (a TableSpec) with no budget at any scale."""
    return replace(spec, **{name: {k: v for k, v in getattr(spec, name).items() if k != BUDGET}
                            for name in ("toy", "tiny", "paper_settings")})


def still_falling_at(curve: Sequence[Sequence[float]] | None) -> bool:
    """Whether the valid loss still falls over the last :data:`TREND_VALIDATIONS` validations
    of ``curve``; a curve too short to test counts as falling (it shows no plateau)."""
    found = last_trend(curve, TREND_VALIDATIONS)
    return found is None or found.p < ALPHA
