"""The rule that says whether a paper's claim about two rows holds at our scale.

A is the row the paper favours; d = mean(A) - mean(B), sign flipped where lower is better.
Rows run on the same seeds are tested on the per-seed differences (:func:`paired`: the same
seed gives both the same data order, so the spread is smaller); other rows by Welch's t-test
(:func:`welch`). Where the spread is zero (to float64's rounding, :data:`ROUNDING`) t is not
defined and the test is exact (sign flips or permutations, scipy's ``permutation_test``):
three seeds then give at best p = 0.25 (paired) or 0.10 (Welch), never 0.

A *superiority* claim (margin M = 0) is two-sided at 5%: *holds* (p < 5%, t > 0), *reversed*
(p < 5%, t < 0), else *not resolved*. A *parity* claim ("matches", "comparable") is a
non-inferiority test against its margin M, one-sided at 2.5%; p is two-sided for both kinds.
A table's p-values are Holm-corrected (:func:`holm`); fewer than :data:`MIN_SEEDS` seeds a
side resolves nothing. The statistics run on the values divided by a power of two near their
largest magnitude (exact), so scaling the values and the margin changes no verdict, t or p.

:func:`seeds_needed`: the seeds a side for 80% power if the true difference (parity: d + M)
and spread were the observed ones (scipy's noncentral t).

    python -m scripts.reproduce.direction --a 10.0 10.5 9.5 --b 9.0 9.6 8.4
    python -m scripts.reproduce.direction --paired --a 10.0 10.5 9.5 --b 9.0 9.6 8.4
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import math
import statistics
import sys
from dataclasses import dataclass
from typing import List, Sequence, Tuple

HOLDS, REVERSED, NOT_RESOLVED = "holds", "reversed", "not resolved"
ALPHA = 0.05     # two-sided level of every claim (a parity claim: 2.5% on its one side)
MIN_SEEDS = 3    # two seeds give a spread, but one wild seed decides it
POWER = 0.8      # the power :func:`seeds_needed` asks for
# the tests, as the records name them
PAIRED, WELCH = "paired t-test", "Welch t-test"
SIGN_FLIP, PERMUTATION = "exact sign-flip test", "exact permutation test"
# a spread below this share of the largest value is float64 rounding (e.g. 10.1 - 8.1 and
# 9.1 - 7.1 differ in the 16th digit): the spread is zero, and the test exact
ROUNDING = 1e-12


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
    (scaled,), _, power = unit_free([finite])
    std = statistics.stdev(scaled) if len(finite) > 1 else math.nan
    return Spread(statistics.fmean(finite), unscale(std, power), len(finite))


def unit_free(groups: Sequence[Sequence[float]], margin: float | None = None
              ) -> Tuple[List[List[float]], float | None, int]:
    """``groups`` and ``margin`` divided by 2^e, e the exponent of their largest magnitude
    (exact), and e; ``ValueError`` where the margin is beyond float64 in those units."""
    biggest = max((abs(v) for group in groups for v in group), default=0.0)
    power = math.frexp(biggest)[1] if biggest else 0
    scaled = [[math.ldexp(v, -power) for v in group] for group in groups]
    try:
        shift = None if margin is None else math.ldexp(margin, -power)
    except OverflowError:
        raise ValueError(f"the margin {margin:g} is beyond float64's range in the units of "
                         f"the values (largest {biggest:g})") from None
    return scaled, shift, power


def unscale(value: float, power: int) -> float:
    """``value`` back in the values' units, infinite beyond float64."""
    try:
        return math.ldexp(value, power)
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass(frozen=True)
class Test:
    """One claim's test: A's advantage ``d``, its ``se``, ``t`` = (d + margin) / se (infinite
    for an exact test of zero spread), ``df``, two-sided ``p``, the test's ``kind`` and the
    seeds ``n`` a side; NaN where a side has fewer than two seeds."""

    d: float
    se: float
    t: float
    df: float
    p: float
    margin: float | None = None
    kind: str = WELCH
    n: int = 0


def exact_p(groups: Sequence[Sequence[float]]) -> float:
    """The two-sided p of the exact test of zero mean (one group: every sign flip) or of
    equal means (two groups: every split)."""
    import numpy as np
    from scipy.stats import permutation_test

    one = len(groups) == 1
    found = permutation_test(
        tuple(np.asarray(g) for g in groups),
        np.mean if one else lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
        vectorized=True, permutation_type="samples" if one else "independent",
        n_resamples=np.inf)
    return float(found.pvalue)


def paired(a: Sequence[float], b: Sequence[float], higher_is_better: bool = True,
           margin: float | None = None) -> Test:
    """The paired t-test of A's per-seed advantage over B (``a[i]``, ``b[i]``: one seed),
    against -``margin``; the sign-flip test where every difference is the same."""
    if len(a) != len(b):
        raise ValueError(f"paired values need one of each row a seed ({len(a)} and {len(b)})")
    (sa, sb), shift, power = unit_free([a, b], margin)
    sign = 1.0 if higher_is_better else -1.0
    diffs = [sign * (x - y) for x, y in zip(sa, sb)]
    zero = len(diffs) > 1 and statistics.stdev(diffs) <= ROUNDING
    return tested([diffs], shift, power, margin, PAIRED, zero)


def welch(a: Sequence[float], b: Sequence[float], higher_is_better: bool = True,
          margin: float | None = None) -> Test:
    """The Welch t-test of A's advantage over B, against -``margin``; the permutation test
    where neither row varies."""
    (sa, sb), shift, power = unit_free([a, b], margin)
    sign = 1.0 if higher_is_better else -1.0
    groups = [[sign * x for x in sa], [sign * x for x in sb]]
    zero = min(map(len, groups)) > 1 and max(
        statistics.variance(group) / len(group) for group in groups) <= ROUNDING ** 2
    return tested(groups, shift, power, margin, WELCH, zero)


def tested(groups: List[List[float]], shift: float | None, power: int, margin: float | None,
           kind: str, zero: bool) -> Test:
    """:func:`paired`'s test of the differences or :func:`welch`'s of A's and B's values
    (A's way up, in :func:`unit_free`'s units, A's side moved by ``shift``)."""
    from scipy.stats import ttest_1samp, ttest_ind

    d = unscale(statistics.fmean(groups[0]) - sum(map(statistics.fmean, groups[1:]))
                if all(groups) else math.nan, power)
    n = min(map(len, groups))
    if n < 2:
        return Test(d, math.nan, math.nan, math.nan, math.nan, margin, kind, n)
    moved = [[x + (shift or 0.0) for x in groups[0]], *groups[1:]]
    if zero:  # the exact test
        centre = statistics.fmean(moved[0]) - sum(map(statistics.fmean, moved[1:]))
        t = math.copysign(math.inf, centre) if centre else 0.0
        return Test(d, 0.0, t, float(sum(map(len, groups)) - len(groups)),
                    exact_p(moved) if centre else 1.0, margin,
                    SIGN_FLIP if len(groups) == 1 else PERMUTATION, n)
    found = ttest_1samp(moved[0], 0.0) if len(groups) == 1 else ttest_ind(*moved,
                                                                          equal_var=False)
    se = math.sqrt(sum(statistics.variance(group) / len(group) for group in groups))
    return Test(d, unscale(se, power), float(found.statistic), float(found.df),
                float(found.pvalue), margin, kind, n)


def seeds_needed(test: Test, sd: float | Tuple[float, float], level: float = ALPHA,
                 most: int = 10 ** 6) -> int | None:
    """The seeds a side at which ``test``'s kind has :data:`POWER` power at the two-sided
    ``level``, for the observed difference (parity: d + M) and spread ``sd`` (paired: of the
    differences; Welch: (s_A, s_B)); the exact test's smallest p where the spread is zero.
    None where no difference was observed; at most ``most``."""
    from scipy.special import comb
    from scipy.stats import nct
    from scipy.stats import t as student_t

    effect = abs(test.d + (test.margin or 0.0))
    if not math.isfinite(effect) or effect == 0.0:
        return None
    sds = sd if isinstance(sd, tuple) else (sd,)
    if test.kind in (SIGN_FLIP, PERMUTATION):  # the exact test: its smallest p below the level
        return next(n for n in itertools.count(2)
                    if (2.0 / 2.0 ** n if len(sds) == 1 else 2.0 / comb(2 * n, n)) < level)
    ratios = [s / effect for s in sds]  # the spread in units of the effect: no units left

    def powerful(n: int) -> bool:
        if len(ratios) == 1:
            df, se = n - 1.0, ratios[0] / math.sqrt(n)
        else:
            va, vb = (r * r / n for r in ratios)
            df = (va + vb) ** 2 / ((va * va + vb * vb) / (n - 1))
            se = math.sqrt(va + vb)
        return nct.sf(student_t.isf(level / 2, df), df, 1.0 / se) >= POWER

    # the power grows with n: the first n from 2 that has it, by bisection
    return min(2 + bisect.bisect_left(range(2, most + 1), True, key=powerful), most)


@dataclass(frozen=True)
class Trend:
    """A least-squares line's ``slope``, t, df and one-sided ``p`` that it falls."""

    slope: float
    t: float
    df: float
    p: float

    def words(self) -> str:
        """The test in words, as the training logs and the claims give it."""
        return (f"slope {self.slope * 1000:+.4f} bits per 1,000 updates, t {self.t:.2f}, "
                f"{self.df:.0f} df, one-sided p {self.p:.3g}")


def falling(points: Sequence[Sequence[float]]) -> Trend:
    """Whether y still falls along x: the least-squares slope's t on n - 2 df, p = P(T <= t)
    (scipy's ``linregress``). NaN for fewer than 3 points or equal x; an exact fit gives p 0
    when it falls, 1 otherwise (linregress keeps t finite there)."""
    from scipy.stats import linregress

    xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
    if len(xs) < 3 or len(set(xs)) == 1:
        return Trend(math.nan, math.nan, math.nan, math.nan)
    fit = linregress(xs, ys, alternative="less")
    df = len(xs) - 2.0
    if fit.stderr == 0.0:
        t = math.copysign(math.inf, fit.slope) if fit.slope else 0.0
        return Trend(float(fit.slope), t, df, 0.0 if fit.slope < 0 else 1.0)
    return Trend(float(fit.slope), float(fit.slope / fit.stderr), df, float(fit.pvalue))


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's step-down adjusted p-values; a NaN stays NaN and is not one of the family.
    Written here: scipy.stats has no Holm."""
    order = sorted((i for i, p in enumerate(p_values) if not math.isnan(p)),
                   key=lambda i: p_values[i])
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def decide(test: Test, p: float | None = None) -> str:
    """The verdict of ``test`` at :data:`ALPHA`, with ``p`` (e.g. Holm's) for its own."""
    p = test.p if p is None else p
    if math.isnan(p) or p >= ALPHA:
        return NOT_RESOLVED
    return HOLDS if test.t > 0 else REVERSED


def too_few_seeds(a: int, b: int) -> str | None:
    """The refusal when a side has fewer than :data:`MIN_SEEDS` seeds, else None."""
    if min(a, b) >= MIN_SEEDS:
        return None
    return f"{NOT_RESOLVED}: fewer than {MIN_SEEDS} seeds a side ({a} and {b})"


def describe(test: Test, verdict: str) -> str:
    """One line: the verdict, what was tested, t, degrees of freedom and p."""
    name = f"{test.kind} of {test.n} pairs" if test.kind in (PAIRED, SIGN_FLIP) else test.kind
    if test.margin is None:
        kind = f"superiority, two-sided {name} at 5%"
    else:
        # "A is less than M behind" (holds) and "more than M behind" (reversed) are the two
        # one-sided tests; each p is half the two-sided one only on its own side
        behind = test.p / 2 if test.t < 0 else 1.0 - test.p / 2
        kind = (f"non-inferiority within a margin of {test.margin:g}, one-sided {name} "
                f"at 2.5%: p {1.0 - behind:.3g} that A is less than {test.margin:g} behind, "
                f"{behind:.3g} that it is more")
    exact = test.kind in (SIGN_FLIP, PERMUTATION)
    statistic = "zero spread, no t" if exact else f"t = {test.t:.2f}, {test.df:.2f} df"
    return (f"{verdict}; d = {test.d:+.4g} (A's advantage), {statistic}, p = {test.p:.3g} "
            f"({kind})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.reproduce.direction",
        description="Does A beat B? The reproduction tables' rule on your own numbers: "
                    "Welch's t-test with Welch-Satterthwaite degrees of freedom (with --paired, "
                    "the paired t-test of the per-seed differences), two-sided at 5% (with "
                    "--margin, non-inferiority: one-sided at 2.5%); where the spread is zero, "
                    "the exact permutation (sign-flip) test. Prints the verdict (holds, "
                    "reversed, not resolved), t, the degrees of freedom, p, and the seeds a "
                    "side that 80%% power needs at the observed difference and spread.",
        epilog="e.g. --a 10.0 10.5 9.5 --b 9.0 9.6 8.4 (one value per seed; at least 3 a side "
               "for a verdict; with --paired, the i-th values of --a and --b are one seed's)")
    parser.add_argument("--a", type=float, nargs="+", required=True, metavar="X",
                        help="row A's figure on each seed (the row the claim favours)")
    parser.add_argument("--b", type=float, nargs="+", required=True, metavar="X",
                        help="row B's figure on each seed")
    parser.add_argument("--paired", action="store_true",
                        help="the rows ran the same seeds, in the same order: test the "
                             "per-seed differences (paired t-test)")
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
    if args.paired and len(args.a) != len(args.b):
        parser.error(f"--paired: give --a and --b one value per seed each ({len(args.a)} and "
                     f"{len(args.b)} given)")
    try:
        test = (paired if args.paired else welch)(args.a, args.b, not args.lower_is_better,
                                                   args.margin)
    except ValueError as error:
        parser.error(f"--margin: {error}; give the values and the margin in the same units")
    print(describe(test, too_few_seeds(len(args.a), len(args.b)) or decide(test)))
    sd = ((statistics.stdev([x - y for x, y in zip(args.a, args.b)]),) if args.paired else
          (spread(args.a).std, spread(args.b).std))
    needed = seeds_needed(test, sd[0] if args.paired else sd)
    print("seeds a side for 80% power at the observed difference and spread: "
          + (f"about {needed}" if needed else "none would do (no difference observed)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
