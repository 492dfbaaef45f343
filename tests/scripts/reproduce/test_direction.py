"""The direction rule: Welch's t-test against float64 values computed independently of it,
Holm's correction, non-inferiority with a margin, its false-positive rate under the null,
and the command line's verdicts on the documented examples."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import numpy as np
import pytest

from scripts.reproduce.direction import (
    ALPHA,
    HOLDS,
    NOT_RESOLVED,
    PERMUTATION,
    REVERSED,
    SIGN_FLIP,
    decide,
    holm,
    main,
    paired,
    seeds_needed,
    spread,
    too_few_seeds,
    welch,
)

from helpers import REPO_ROOT


def t_two_sided_p(t: float, df: float, steps: int = 20000) -> float:
    """2 P(T_df > |t|) by Simpson's rule on the Student t density, in float64: 1 minus twice
    the density's integral from 0 to |t| (no library CDF)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    x = np.linspace(0.0, abs(t), steps + 1)
    f = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df))
    h = abs(t) / steps
    integral = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return float(1.0 - 2.0 * integral)


def test_spread_is_mean_and_sample_std_leaving_out_failed_seeds():
    s = spread([1.0, 2.0, float("nan"), 4.0])
    assert s.n == 3
    assert s.mean == pytest.approx(7 / 3)
    assert s.std == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert s.text(1) == f"{7 / 3:.1f} ± {statistics.stdev([1.0, 2.0, 4.0]):.1f}"
    assert spread([]).n == 0 and spread([]).text() == "-"


def test_the_documented_example_is_welchs_t_and_degrees_of_freedom():
    test = welch([10.0, 10.5, 9.5], [9.0, 9.6, 8.4])
    va, vb = 0.25 / 3, 0.36 / 3  # s^2 / n of each side
    assert test.d == pytest.approx(1.0, abs=1e-12)
    assert test.se == pytest.approx(math.sqrt(va + vb), rel=1e-12)
    assert test.t == pytest.approx(1.0 / math.sqrt(va + vb), rel=1e-12)
    assert test.df == pytest.approx((va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2), rel=1e-12)
    assert round(test.t, 2) == 2.22 and round(test.df, 2) == 3.87
    assert test.p == pytest.approx(t_two_sided_p(test.t, test.df), abs=1e-10)
    assert decide(test) == NOT_RESOLVED


@pytest.mark.parametrize("a, b", [
    ([3.1, 2.7, 3.6], [2.0, 2.9, 1.1, 2.2]),     # non-integer df
    ([0.51, 0.48, 0.55, 0.50, 0.47], [0.45, 0.52, 0.40]),
    ([12.0, 14.5, 9.9], [11.8, 12.1, 12.0]),       # a small t
    ([5.0, 5.2, 5.1], [3.0, 3.4, 3.1]),             # a large t
])
def test_p_matches_the_t_density_integrated_in_float64(a, b):
    test = welch(a, b)
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    assert test.t == pytest.approx((np.mean(a) - np.mean(b)) / math.sqrt(va + vb), rel=1e-12)
    assert test.df == pytest.approx((va + vb) ** 2 / (va ** 2 / (len(a) - 1)
                                                      + vb ** 2 / (len(b) - 1)), rel=1e-12)
    assert test.df != round(test.df)
    assert test.p == pytest.approx(t_two_sided_p(test.t, test.df), abs=1e-10)


def test_p_matches_closed_forms_and_table_values():
    # df 1 (Cauchy) and 2 have closed forms; the 97.5% quantiles at 4 and 10 df give p = 5%
    one = welch([1.0, 2.0], [0.0, 0.0])  # df 1 (one side has no spread)
    assert one.df == pytest.approx(1.0)
    assert one.p == pytest.approx(1 - 2 / math.pi * math.atan(abs(one.t)), abs=1e-12)
    two = welch([1.0, 2.0, 4.5], [0.0, 0.0, 0.0])
    assert two.df == pytest.approx(2.0)
    assert two.p == pytest.approx(1 - two.t / math.sqrt(2 + two.t ** 2), abs=1e-12)
    # equal spreads, n = 3 a side: df = 4; a shift of 2.7764451051977987 SE is p = 5%
    base = [0.0, 1.0, 2.0]
    se = math.sqrt(2 / 3)
    at_quantile = welch([v + 2.7764451051977987 * se for v in base], base)
    assert at_quantile.df == pytest.approx(4.0)
    assert at_quantile.p == pytest.approx(0.05, abs=1e-12)


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_clear_gap_holds_and_reversed_gap_is_reversed(higher_is_better):
    high, low = [30.0, 30.2, 29.9], [25.0, 25.3, 24.8]
    better, worse = (high, low) if higher_is_better else (low, high)
    assert decide(welch(better, worse, higher_is_better)) == HOLDS
    assert decide(welch(worse, better, higher_is_better)) == REVERSED


def test_the_threshold_is_the_t_quantile_not_two_standard_errors():
    # n = 3 a side, equal spreads: df 4, two-sided 5% at t = 2.776; 2.5 SE is not enough
    base = [0.0, 1.0, 2.0]
    se = math.sqrt(2 / 3)
    assert decide(welch([v + 2.5 * se for v in base], base)) == NOT_RESOLVED
    assert decide(welch([v + 2.78 * se for v in base], base)) == HOLDS


def test_a_parity_claim_is_non_inferiority_within_its_margin():
    a, b = [9.5, 9.6, 9.4], [10.0, 10.1, 9.9]
    assert decide(welch(a, b)) == REVERSED  # as a superiority claim, A is behind
    within = welch(a, b, margin=1.0)
    assert within.t == pytest.approx(0.5 / math.sqrt(0.02 / 3), rel=1e-12)
    assert decide(within) == HOLDS and within.p / 2 < ALPHA / 2
    # more than the margin behind, resolved: reversed; about at the margin: not resolved
    assert decide(welch([8.5, 8.6, 8.4], b, margin=1.0)) == REVERSED
    assert decide(welch([9.0, 9.1, 8.8], b, margin=1.0)) == NOT_RESOLVED
    # lower is better: A's figure may be up to the margin above B's
    assert decide(welch(b, a, higher_is_better=False, margin=1.0)) == HOLDS


def test_holm_adjusts_step_down_and_keeps_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.2, 0.001]) == pytest.approx([0.2, 0.002])
    assert holm([0.5, 0.6, 0.9]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([]) == []
    nan = float("nan")
    with_nan = holm([0.01, nan, 0.04])  # a test that could not be run is not counted
    assert with_nan[0] == pytest.approx(0.02) and math.isnan(with_nan[1])
    assert with_nan[2] == pytest.approx(0.04)
    test = welch([10.0, 10.1, 9.9], [9.0, 9.1, 8.9])
    assert decide(test) == HOLDS
    assert decide(test, p=holm([test.p, 0.5, 0.5, 0.5, 0.5] + [0.9] * 200)[0]) == NOT_RESOLVED


def test_fewer_than_three_seeds_a_side_resolve_nothing():
    three = [1.0, 1.1, 1.2]
    assert too_few_seeds(2, 3) == "not resolved: fewer than 3 seeds a side (2 and 3)"
    assert too_few_seeds(3, 3) is None
    assert math.isnan(welch([40.0], three).p)
    assert decide(welch([40.0], three)) == NOT_RESOLVED


def test_zero_spread_gets_an_exact_test_never_p_zero():
    # 3 against 3, every seed equal: the exact permutation test's smallest p is 2 / C(6, 3)
    test = welch([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert (test.kind, test.t) == (PERMUTATION, math.inf)
    assert test.p == pytest.approx(2 / math.comb(6, 3)) and decide(test) == NOT_RESOLVED
    # paired, every difference equal: the sign-flip test's smallest p is 2 / 2^n
    test = paired([2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    assert test.kind == SIGN_FLIP and test.p == pytest.approx(2 / 2 ** 3)
    six = paired([1.0] * 6, [0.0] * 6)
    assert six.p == pytest.approx(2 / 2 ** 6) and decide(six) == HOLDS
    assert decide(welch([1.0] * 3, [1.0] * 3)) == NOT_RESOLVED


@pytest.mark.parametrize("spreads", [(1.0, 1.0), (1.0, 3.0)])
def test_false_positive_rate_under_the_null_is_at_most_about_five_percent(spreads):
    from scipy.stats import binomtest

    rng = np.random.default_rng(20240601)
    trials = 4000
    draws = [(rng.normal(0, spreads[0], 3), rng.normal(0, spreads[1], 3))
             for _ in range(trials)]
    ours = sum(decide(welch(a, b)) != NOT_RESOLVED for a, b in draws)
    # Welch at 3 seeds a side is slightly conservative with equal spreads (about 3.6%),
    # about exact with unequal ones; never above 5%
    assert binomtest(ours, trials, ALPHA, alternative="greater").pvalue > 1e-3
    if spreads[0] != spreads[1]:
        assert binomtest(ours, trials, ALPHA).pvalue > 1e-3
    # the rule it replaced (difference beyond 2 SE) declares a direction far more often
    old = sum(abs(np.mean(a) - np.mean(b)) > 2 * math.sqrt(np.var(a, ddof=1) / 3
                                                          + np.var(b, ddof=1) / 3)
              for a, b in draws)
    assert binomtest(old, trials, ALPHA, alternative="greater").pvalue < 1e-6


def test_non_inferiority_at_the_margin_holds_two_and_a_half_percent_of_the_time():
    from scipy.stats import binomtest

    rng = np.random.default_rng(7)
    trials = 4000
    holds = sum(decide(welch(rng.normal(-1.0, 1.0, 3), rng.normal(0, 2.0, 3),
                             margin=1.0)) == HOLDS for _ in range(trials))
    assert binomtest(holds, trials, ALPHA / 2).pvalue > 1e-3


@pytest.mark.parametrize("args, verdict, t, df", [
    (["--a", "10.0", "10.5", "9.5", "--b", "9.0", "9.6", "8.4"], "not resolved", "2.22",
     "3.87"),
    (["--a", "10.0", "10.1", "9.9", "--b", "9.0", "9.1", "8.9"], "holds", "12.25", "4.00"),
    (["--a", "9.5", "9.6", "9.4", "--b", "10.0", "10.1", "9.9", "--margin", "1"], "holds",
     "6.12", "4.00"),
    (["--a", "1", "2", "3", "--b", "5", "6", "7", "--lower-is-better"], "holds", "4.90",
     "4.00"),
    (["--a", "8", "8.1", "7.9", "--b", "10.0", "10.1", "9.9", "--margin", "1"], "reversed",
     "-12.25", "4.00"),
])
def test_the_command_line_prints_verdict_t_df_and_p(args, verdict, t, df, capsys):
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{verdict};") and f"t = {t}, {df} df, p = " in out
    if "--margin" in args:  # each one-sided p is half the two-sided on its own side only
        assert "non-inferiority within a margin of 1" in out
        assert ("p 0.0018 that A is less than 1 behind, 0.998 that it is more" in out
                if verdict == "holds" else
                "p 1 that A is less than 1 behind, 0.000128 that it is more" in out)


def test_the_command_line_runs_as_a_module_and_names_bad_flags():
    run = subprocess.run([sys.executable, "-m", "scripts.reproduce.direction", "--a", "10.0",
                          "10.5", "9.5", "--b", "9.0", "9.6", "8.4"], capture_output=True,
                         text=True, cwd=REPO_ROOT, check=True)
    assert run.stdout.startswith("not resolved;") and "p = 0.093" in run.stdout
    for bad, message in ((["--a", "1", "--b", "1", "2"], "--a: give at least 2 values"),
                         (["--a", "1", "2", "--b", "1", "nan"], "--b: every value must be"),
                         (["--a", "1", "2", "--b", "1", "2", "--margin", "-1"], "--margin:")):
        failed = subprocess.run([sys.executable, "-m", "scripts.reproduce.direction", *bad],
                                capture_output=True, text=True, cwd=REPO_ROOT)
        assert failed.returncode == 2 and message in failed.stderr


def test_the_paired_test_is_the_one_sample_t_test_of_the_differences():
    a, b = [10.0, 10.5, 9.5, 11.0], [9.1, 9.4, 8.7, 10.2]
    diffs = np.subtract(a, b)
    test = paired(a, b)
    se = np.std(diffs, ddof=1) / math.sqrt(4)
    assert test.kind == "paired t-test" and test.df == 3 and test.n == 4
    assert test.d == pytest.approx(diffs.mean(), rel=1e-12)
    assert test.t == pytest.approx(diffs.mean() / se, rel=1e-12)
    assert test.p == pytest.approx(t_two_sided_p(test.t, 3), abs=1e-10)
    # non-inferiority shifts the differences by the margin; lower-is-better flips them
    assert paired(a, b, margin=1.0).t == pytest.approx((diffs.mean() + 1.0) / se, rel=1e-12)
    assert paired(b, a, higher_is_better=False).t == pytest.approx(test.t, rel=1e-12)
    # the seeds' shared part cancels: the same rows as unpaired rows are not resolved
    assert decide(test) == HOLDS and decide(welch(a, b)) == NOT_RESOLVED


@pytest.mark.parametrize("factor", [2.0 ** -1063, 1e-320, 2.0 ** 664, 1e200, 3.7])
@pytest.mark.parametrize("test_of", [welch, paired])
def test_verdict_t_and_p_do_not_depend_on_the_units(factor, test_of):
    a, b = [10.0, 10.5, 9.5, 10.25], [9.0, 9.6, 8.4, 9.75]
    base = test_of(a, b, margin=0.5)
    scaled = test_of([v * factor for v in a], [v * factor for v in b], margin=0.5 * factor)
    # a power of two is exact, other factors round each value once; subnormals keep only
    # 10-14 bits of each value (a relative rounding of ~1e-4)
    rel = 5e-3 if factor < 1e-300 else 0.0 if math.frexp(factor)[0] == 0.5 else 1e-12
    assert scaled.t == pytest.approx(base.t, rel=rel) and math.isfinite(scaled.t)
    assert scaled.p == pytest.approx(base.p, rel=max(rel, 1e-12) * 10)
    assert scaled.df == pytest.approx(base.df, rel=rel * 10)
    assert decide(scaled) == decide(base)
    assert scaled.d == pytest.approx(base.d * factor, rel=max(rel, 1e-12))
    assert spread([v * factor for v in a]).std == pytest.approx(spread(a).std * factor,
                                                                 rel=max(rel, 1e-12))


def test_the_seeds_a_claim_needs_give_it_80_percent_power():
    from scipy.stats import ttest_1samp

    rng = np.random.default_rng(3)
    test = paired([1.0, 1.6, 0.4], [0.0, 0.0, 0.0])  # d 1, spread 0.6 of the differences
    n = seeds_needed(test, 0.6)
    assert n == seeds_needed(paired([v * 1e-9 for v in (1.0, 1.6, 0.4)], [0.0] * 3), 0.6e-9)
    # simulated at the observed difference and spread: at least 80% at n, less at n - 1
    for size, low, high in ((n, 0.78, 1.0), (n - 1, 0.0, 0.82)):
        hits = np.mean(ttest_1samp(rng.normal(1.0, 0.6, (4000, size)), 0.0, axis=1).pvalue
                       < ALPHA)
        assert low < hits < high, (size, hits)
    assert seeds_needed(paired([1.0] * 3, [1.0] * 3), 0.0) is None  # nothing to detect
    assert seeds_needed(paired([1.0] * 3, [0.0] * 3), 0.0) == 6  # 2 / 2^6 < 5%
    assert seeds_needed(welch([1.0] * 3, [0.0] * 3), (0.0, 0.0)) == 4  # 2 / C(8, 4) < 5%


@pytest.mark.parametrize("flags", [["--paired"], []])
def test_no_zero_spread_holds_with_p_zero_on_the_command_line(flags, capsys):
    assert main([*flags, "--a", "1", "1", "1", "--b", "0", "0", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("not resolved;") and "p = 0 " not in out
    assert "p = 0.25" in out if flags else "p = 0.1 " in out
