"""The noise-aware rule that says whether a paper's direction holds at our scale.

For two rows A (the paper's winner) and B, each measured on n_A and n_B seeds with sample
standard deviations s_A and s_B, the difference of means d = mean_A - mean_B (sign flipped
when lower is better) has the standard error

    SE = sqrt(s_A^2 / n_A + s_B^2 / n_B)

(Welch's). The verdict is "holds" when d > 2 SE, "reversed" when d < -2 SE and otherwise
"not resolved at this scale": two standard errors is roughly a 95% two-sided interval, so a
table built from a few seeds of small models claims a direction only when the seeds agree
on it. With fewer than two seeds on either side the spread is unknown and nothing is
resolved.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

HOLDS, REVERSED, NOT_RESOLVED = "holds", "reversed", "not resolved at this scale"
Z = 2.0  # how many standard errors a difference must exceed


@dataclass(frozen=True)
class Spread:
    """Mean, sample standard deviation and count of one cell's values over seeds."""

    mean: float
    std: float
    n: int

    def text(self, digits: int = 2) -> str:
        if self.n == 0:
            return "-"
        if self.n == 1 or math.isnan(self.std):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


def spread(values: Sequence[float]) -> Spread:
    """The :class:`Spread` of the finite ``values`` (NaN, a failed seed, is left out)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return Spread(math.nan, math.nan, 0)
    std = statistics.stdev(finite) if len(finite) > 1 else math.nan
    return Spread(statistics.fmean(finite), std, len(finite))


def difference(better: Spread, worse: Spread, higher_is_better: bool) -> tuple[float, float]:
    """``(d, SE)``: the winner's advantage in the metric's good direction and its standard
    error (NaN when either side has fewer than two seeds)."""
    d = better.mean - worse.mean
    if not higher_is_better:
        d = -d
    if better.n < 2 or worse.n < 2:
        return d, math.nan
    return d, math.sqrt(better.std ** 2 / better.n + worse.std ** 2 / worse.n)


def verdict(better: Spread, worse: Spread, higher_is_better: bool) -> str:
    """:data:`HOLDS`, :data:`REVERSED` or :data:`NOT_RESOLVED` by the rule above."""
    d, se = difference(better, worse, higher_is_better)
    if math.isnan(d) or math.isnan(se):
        return NOT_RESOLVED
    if d > Z * se:
        return HOLDS
    if d < -Z * se:
        return REVERSED
    return NOT_RESOLVED
