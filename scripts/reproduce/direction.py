"""The rule that says whether a paper's claim about two rows holds at our scale.

Rows A (the paper's winner) and B are measured on n_A and n_B seeds, with means m and sample
standard deviations s. A's advantage in the metric's good direction is d = m_A - m_B (sign
flipped when lower is better), with Welch's standard error SE = sqrt(s_A^2/n_A + s_B^2/n_B)
and the Welch-Satterthwaite degrees of freedom

    df = SE^4 / ((s_A^2/n_A)^2 / (n_A - 1) + (s_B^2/n_B)^2 / (n_B - 1)).

A *superiority* claim ("A beats B") is the two-sided Welch t-test of d = 0 at 5%:
t = d / SE, p = 2 P(T_df > |t|); it *holds* when p < 5% and t > 0, is *reversed* when
p < 5% and t < 0, and is otherwise *not resolved*. A *parity* claim ("A matches B",
"comparable", ">=") carries a margin M in the metric's units and is a non-inferiority
test: t = (d + M) / SE, one-sided at 2.5%. It *holds* when A is shown to be no more than M
behind (one-sided p = p/2 < 2.5% with t > 0), is *reversed* when A is shown to be more than
M behind (t < 0), and is otherwise not resolved; p is reported two-sided for both kinds, so
every claim of a table is read against the same 5%. Over a table's tested claims the
p-values are Holm-corrected (:func:`holm`): the family of claims keeps a 5% chance of any
false verdict. Fewer than :data:`MIN_SEEDS` seeds on a side resolves nothing.

    python -m scripts.reproduce.direction --a 10.0 10.5 9.5 --b 9.0 9.6 8.4
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from typing import List, Sequence

HOLDS, REVERSED, NOT_RESOLVED = "holds", "reversed", "not resolved"
ALPHA = 0.05     # two-sided level of every claim (a parity claim: 2.5% on its one side)
MIN_SEEDS = 3    # two seeds give a spread, but one wild seed decides it


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


@dataclass(frozen=True)
class Welch:
    """One claim's test: ``d`` A's advantage (good direction), ``se`` its standard error,
    ``t`` = (d + margin) / se, ``df`` Welch-Satterthwaite, ``p`` two-sided; NaN where a side
    has fewer than two seeds."""

    d: float
    se: float
    t: float
    df: float
    p: float
    margin: float | None = None


def welch(a: Spread, b: Spread, higher_is_better: bool = True,
          margin: float | None = None) -> Welch:
    """The Welch t-test of A's advantage over B (against -``margin`` for a parity claim)."""
    from scipy.stats import t as student_t

    d = (a.mean - b.mean) * (1.0 if higher_is_better else -1.0)
    if a.n < 2 or b.n < 2:
        return Welch(d, math.nan, math.nan, math.nan, math.nan, margin)
    va, vb = a.std ** 2 / a.n, b.std ** 2 / b.n
    se = math.sqrt(va + vb)
    shifted = d + (margin or 0.0)
    if se == 0.0:  # every seed of both rows agrees: any difference is certain
        t = math.copysign(math.inf, shifted) if shifted else 0.0
        return Welch(d, se, t, a.n + b.n - 2.0, 0.0 if shifted else 1.0, margin)
    df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    t = shifted / se
    return Welch(d, se, t, df, float(2.0 * student_t.sf(abs(t), df)), margin)


@dataclass(frozen=True)
class Trend:
    """A least-squares line through (x, y) points: its ``slope`` (y per x), t and degrees of
    freedom, and ``p`` of the one-sided test that y falls (slope < 0)."""

    slope: float
    t: float
    df: float
    p: float


def falling(points: Sequence[Sequence[float]]) -> Trend:
    """Whether y still falls along x: slope b = Sxy / Sxx, residual variance
    s^2 = sum (y - a - b x)^2 / (n - 2), t = b / (s / sqrt(Sxx)) on n - 2 degrees of freedom,
    p = P(T <= t). NaN figures for fewer than 3 points or equal x; a line fitted exactly
    (s = 0) gives p 0 when it falls, 1 otherwise."""
    from scipy.stats import t as student_t

    xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
    n = len(xs)
    if n < 3:
        return Trend(math.nan, math.nan, math.nan, math.nan)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0.0:
        return Trend(math.nan, math.nan, math.nan, math.nan)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    rss = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, ys))
    df = n - 2.0
    se = math.sqrt(rss / df / sxx)
    if se == 0.0:
        t = math.copysign(math.inf, slope) if slope else 0.0
        return Trend(slope, t, df, 0.0 if slope < 0 else 1.0)
    t = slope / se
    return Trend(slope, t, df, float(student_t.cdf(t, df)))


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's step-down adjusted p-values (each compared with :data:`ALPHA`): the i-th
    smallest of the m tests is multiplied by m - i (i from 0), kept monotone and capped at
    1. A NaN (a test that could not be run) stays NaN and is not one of the m."""
    order = sorted((i for i, p in enumerate(p_values) if not math.isnan(p)),
                   key=lambda i: p_values[i])
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def decide(test: Welch, p: float | None = None) -> str:
    """:data:`HOLDS`, :data:`REVERSED` or :data:`NOT_RESOLVED` from ``test`` at
    :data:`ALPHA`, with ``p`` (e.g. Holm's adjusted p) in place of the test's own."""
    p = test.p if p is None else p
    if math.isnan(p) or p >= ALPHA:
        return NOT_RESOLVED
    return HOLDS if test.t > 0 else REVERSED


def too_few_seeds(a: Spread, b: Spread) -> str | None:
    """The refusal when a side has fewer than :data:`MIN_SEEDS` seeds, else None."""
    if min(a.n, b.n) >= MIN_SEEDS:
        return None
    return f"{NOT_RESOLVED}: fewer than {MIN_SEEDS} seeds a side ({a.n} and {b.n})"


def describe(test: Welch, verdict: str) -> str:
    """One line: the verdict, what was tested, t, degrees of freedom and p."""
    if test.margin is None:
        kind = "superiority, two-sided Welch t-test at 5%"
    else:
        # "A is less than M behind" (holds) and "more than M behind" (reversed) are the two
        # one-sided tests of t; each p is half the two-sided one only on its own side
        behind = test.p / 2 if test.t < 0 else 1.0 - test.p / 2
        kind = (f"non-inferiority within a margin of {test.margin:g}, one-sided Welch t-tests "
                f"at 2.5%: p {1.0 - behind:.3g} that A is less than {test.margin:g} behind, "
                f"{behind:.3g} that it is more")
    return (f"{verdict}; d = {test.d:+.4g} (A's advantage), t = {test.t:.2f}, "
            f"{test.df:.2f} df, p = {test.p:.3g} ({kind})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.reproduce.direction",
        description="Does A beat B? The reproduction tables' rule on your own numbers: "
                    "Welch's t-test with Welch-Satterthwaite degrees of freedom, two-sided at "
                    "5% (with --margin, non-inferiority: one-sided at 2.5%). Prints the "
                    "verdict (holds, reversed, not resolved), t, the degrees of freedom and p.",
        epilog="e.g. --a 10.0 10.5 9.5 --b 9.0 9.6 8.4 (one value per seed; at least 3 a side "
               "for a verdict)")
    parser.add_argument("--a", type=float, nargs="+", required=True, metavar="X",
                        help="row A's figure on each seed (the row the claim favours)")
    parser.add_argument("--b", type=float, nargs="+", required=True, metavar="X",
                        help="row B's figure on each seed")
    parser.add_argument("--lower-is-better", action="store_true",
                        help="lower figures are better (a loss, a time); default: higher")
    parser.add_argument("--margin", type=float, default=None, metavar="M",
                        help="test the parity claim 'A is not worse than B by more than M' "
                             "(in the figures' units) instead of 'A beats B'")
    args = parser.parse_args(argv)
    for flag, values in (("--a", args.a), ("--b", args.b)):
        if not all(math.isfinite(v) for v in values):
            parser.error(f"{flag}: every value must be a finite number")
        if len(values) < 2:
            parser.error(f"{flag}: give at least 2 values (one per seed; 3 for a verdict)")
    if args.margin is not None and not (math.isfinite(args.margin) and args.margin > 0):
        parser.error("--margin: give a positive number in the figures' units")
    a, b = spread(args.a), spread(args.b)
    test = welch(a, b, not args.lower_is_better, args.margin)
    print(describe(test, too_few_seeds(a, b) or decide(test)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
