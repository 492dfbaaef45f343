"""The noise-aware direction rule on synthetic numbers, in both directions."""

from __future__ import annotations

import math
import statistics

import pytest

from scripts.reproduce.direction import (
    HOLDS,
    NOT_RESOLVED,
    REVERSED,
    difference,
    spread,
    verdict,
)


def test_spread_is_mean_and_sample_std_leaving_out_failed_seeds():
    s = spread([1.0, 2.0, float("nan"), 4.0])
    assert s.n == 3
    assert s.mean == pytest.approx(7 / 3)
    assert s.std == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert s.text(1) == f"{7 / 3:.1f} ± {statistics.stdev([1.0, 2.0, 4.0]):.1f}"
    assert spread([]).n == 0 and spread([]).text() == "-"


def test_standard_error_is_welchs():
    a, b = spread([10.0, 11.0, 12.0]), spread([1.0, 3.0, 5.0])
    d, se = difference(a, b, higher_is_better=True)
    assert d == pytest.approx(8.0)
    assert se == pytest.approx(math.sqrt(1.0 / 3 + 4.0 / 3))


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_clear_gap_holds_and_reversed_gap_is_reversed(higher_is_better):
    high, low = spread([30.0, 30.2, 29.9]), spread([25.0, 25.3, 24.8])
    better, worse = (high, low) if higher_is_better else (low, high)
    assert verdict(better, worse, higher_is_better) == HOLDS
    assert verdict(worse, better, higher_is_better) == REVERSED


def test_overlapping_seeds_are_not_resolved():
    a, b = spread([30.0, 31.5, 29.0]), spread([29.5, 30.5, 30.9])
    d, se = difference(a, b, True)
    assert abs(d) < 2 * se
    assert verdict(a, b, True) == NOT_RESOLVED


def test_the_threshold_is_two_standard_errors():
    # d = 1, SE = sqrt(2 * 0.25 / 2) = 0.5: exactly 2 SE is not enough, a bit more is
    b = spread([0.0, 0.5, -0.5])
    se = b.std * math.sqrt(2 / 3)
    just_below = spread([v + 2 * se - 1e-9 for v in (0.0, 0.5, -0.5)])
    just_above = spread([v + 2 * se + 1e-6 for v in (0.0, 0.5, -0.5)])
    assert verdict(just_below, b, True) == NOT_RESOLVED
    assert verdict(just_above, b, True) == HOLDS


def test_one_seed_never_resolves_even_a_large_gap():
    assert verdict(spread([40.0]), spread([1.0, 1.1]), True) == NOT_RESOLVED
    assert verdict(spread([40.0, 41.0]), spread([]), True) == NOT_RESOLVED
