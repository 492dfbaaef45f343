"""One budget a table: the cells a budget trains, the grid cells it leaves alone, and the
claims on rows trained at it (still learning at U, short of U, not one budget)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from scripts.reproduce.budget import PILOT_SEEDS, TREND_VALIDATIONS, at_budget, with_budget
from scripts.reproduce.cell_plan import at_rate
from scripts.reproduce.claims import judge
from scripts.reproduce.kinds.translation import plateau_flags
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec
from scripts.reproduce.stop_rule import still_falling
from scripts.reproduce.tables import TABLES

TABLE4 = TABLES["relu_former_table4"]


def test_a_budget_trains_chosen_cells_exactly_u_updates_and_leaves_the_grid_alone():
    toy = TABLE4.settings("toy")
    assert toy["budget_updates"] == 80000
    plain = {k: v for k, v in toy.items() if k != "budget_updates"}
    # the grid's cells are the cells the records hold: the budget is not one of their settings
    assert at_rate(toy, 5e-3, search=True) == at_rate(plain, 5e-3, search=True)
    chosen = at_rate(toy, 5e-3)
    assert (chosen["max_update"], chosen["patience"], chosen["max_epoch"]) == (80000, 0, 0)
    assert chosen["lr"] == 5e-3 and chosen["budget_updates"] == 80000
    # the tiny scale (the tests') trains to a plateau, with its keys as before
    assert at_rate(TABLE4.settings("tiny"), 4e-2) == at_rate(
        {k: v for k, v in TABLE4.settings("tiny").items() if k != "budget_updates"}, 4e-2)
    # another table starting from Table 4's models starts from the recorded plateau cells
    assert "budget_updates" not in with_budget(TABLE4).settings("toy")
    assert at_budget({"max_update": None}, search=False) == {"max_update": None}


def test_a_budgeted_cell_validates_every_half_epoch_and_nowhere_else():
    flags = plateau_flags({"max_epoch": 0, "patience": 0, "validations_per_epoch": 2}, 284)
    given = dict(zip(flags[::2], flags[1::2]))
    assert given["--max-epoch"] == "0" and given["--patience"] == "0"
    assert given["--validate-interval-updates"] == "142"
    assert int(given["--validate-interval"]) > 80000 // 284  # no validation at an epoch's end


SCORE = Metric("score", "score")
SPEC = TableSpec(name="t", title="t", paper="P", claim="a beats b", kind="translation",
                 metrics=(SCORE,), rows=(Row("a", "A"), Row("b", "B")),
                 comparisons=(Comparison("a", "b", "score", "a beats b"),))
FLAT = [[142 * (i + 1), 2.0 + 0.01 * (-1) ** i] for i in range(40)]
FALLING = [[142 * (i + 1), 3.0 - 0.01 * i + 0.001 * (-1) ** i] for i in range(40)]


def budget_cells(curves: dict, updates: int = 142 * 40, budget=142 * 40,
                 seeds=(1, 2, 3)) -> list:
    found = []
    for key, score in (("a", 10.0), ("b", 8.0)):
        for seed in seeds:
            wobble = 0.1 * (seed - 2) * (1 if key == "a" else -1)  # paired spread 0.2
            result = {"figures": {"score": score + wobble}, "stopped": "cap",
                      "curve": curves.get((key, seed), FLAT), "updates": updates,
                      "budget_updates": budget(key) if callable(budget) else budget}
            found.append(SimpleNamespace(row=SPEC.row(key), seed=seed, result=result,
                                         stale=None))
    return found


def test_rows_at_one_budget_whose_loss_stopped_falling_get_a_verdict():
    (claim,) = judge(SPEC, budget_cells({}), {})
    assert claim["verdict"] == "holds"


def test_a_row_whose_mean_curve_still_falls_over_its_last_16_validations_is_still_learning():
    assert TREND_VALIDATIONS == 16
    (claim,) = judge(SPEC, budget_cells({("b", 2): FALLING}), {})
    assert claim["verdict"].startswith(f"not resolved: still learning at {142 * 40}: B's "
                                       "valid loss (the mean of its 3 seeds) still falls")
    assert "one-sided p" in claim["verdict"]


def test_the_trend_at_u_reads_the_pilot_seeds_and_seeds_added_for_power_do_not_reopen_it():
    """Seeds 1-3 set U; a seed added later, however its curve runs, leaves the test as it
    was, and a falling pilot stays falling whatever flat seeds are added."""
    assert PILOT_SEEDS == 3
    six = range(1, 7)
    (claim,) = judge(SPEC, budget_cells({("b", 5): FALLING, ("b", 6): FALLING}, seeds=six), {})
    assert claim["verdict"] == "holds" and claim["seeds"]["b"] == list(six)
    (claim,) = judge(SPEC, budget_cells({("b", 2): FALLING}, seeds=six), {})
    assert claim["verdict"].startswith(f"not resolved: still learning at {142 * 40}: B's "
                                       "valid loss (the mean of its 3 seeds, the pilot of its "
                                       "6) still falls")


def test_one_test_a_row_a_seed_falling_by_chance_beside_one_rising_is_no_trend():
    """Each seed tested alone, seed 2 would read falling; the row's mean curve is flat."""
    from scripts.reproduce.budget import mean_curve, row_trend, still_falling_at

    rising = [[update, 2 * 2.0 - loss] for update, loss in FALLING]
    assert still_falling(FALLING, 8) and not still_falling(rising, 8)
    (claim,) = judge(SPEC, budget_cells({("b", 2): FALLING, ("b", 3): rising}), {})
    assert claim["verdict"] == "holds"
    mean = mean_curve([FALLING, rising, FLAT])
    assert [update for update, _ in mean] == [update for update, _ in FLAT]
    assert mean[0][1] == pytest.approx((FALLING[0][1] + rising[0][1] + FLAT[0][1]) / 3)
    # a seed's diverged (NaN) validations leave the updates the others share
    broken = [[update, math.nan if i == 5 else loss] for i, (update, loss) in enumerate(FLAT)]
    assert len(mean_curve([FLAT, broken])) == len(FLAT) - 1
    assert still_falling_at(row_trend([FLAT[:10]]))  # too short to test: no plateau shown


def test_a_seed_short_of_its_budget_or_rows_of_two_budgets_get_no_verdict():
    (claim,) = judge(SPEC, budget_cells({}, updates=1000), {})
    assert "stopped before their budget" in claim["verdict"]
    (claim,) = judge(SPEC, budget_cells({}, budget=lambda key: 5680 if key == "a" else None,
                                        updates=5680), {})
    assert claim["verdict"] == ("not resolved: not one budget (A 5680 updates; B to its "
                                "plateau)")


def test_claims_within_the_cap_ask_for_seeds_and_those_beyond_say_how_many():
    from scripts.reproduce.claims import SEEDS_CAP, seeds_wanted

    # paired spread 0.2 around a difference of 2: resolved; around 0.3: a few seeds more
    assert seeds_wanted(SPEC, budget_cells({}), {}) == {}
    close = budget_cells({})
    for cell in close[3:]:  # b, 0.3 behind a on average instead of 2
        cell.result["figures"]["score"] += 1.7
    (claim,) = judge(SPEC, close, {})
    wanted = seeds_wanted(SPEC, close, {})
    needed = claim["seeds_needed"]
    assert 3 < needed <= SEEDS_CAP and wanted == {"a": needed, "b": needed}
    assert claim["verdict"] == f"not resolved: needs about {needed} seeds a side"
    # a difference far below its spread needs more than the cap: said, not asked for
    far = budget_cells({})
    for cell in far[3:]:
        cell.result["figures"]["score"] += 1.99
    (claim,) = judge(SPEC, far, {})
    assert claim["seeds_needed"] > SEEDS_CAP and seeds_wanted(SPEC, far, {}) == {}
    assert claim["verdict"] == f"not resolved: needs about {claim['seeds_needed']} seeds a side"


def test_add_seeds_runs_the_seeds_a_claim_within_reach_needs(monkeypatch, tmp_path):
    import json
    from dataclasses import replace as copy

    from scripts.reproduce import cell_plan, runner
    from scripts.reproduce.__main__ import add_seeds
    from scripts.reproduce.kinds import Step
    from scripts.reproduce.run_options import RunOptions

    trained = []

    def steps(spec, row, seed, scale, settings, data, folder, parent):
        def train() -> None:  # each seed moves both rows alike: paired, no spread
            trained.append((row.key, seed))
            score = {"a": 10.0, "b": 5.0}[row.key] + 0.1 * seed
            (folder / "out.json").write_text(json.dumps(score))
        return [Step("out.json", call=train)]

    kind = SimpleNamespace(
        prepare=lambda *_: {"description": "synthetic"}, steps=steps,
        cell_settings=lambda spec, row, seed, *_: {"row": row.key, "seed": seed},
        collect=lambda spec, row, folder: {"score": json.loads((folder / "out.json")
                                                             .read_text()),
                                           "stopped": "plateau"})
    for module in (runner, cell_plan):
        monkeypatch.setattr(module, "kind_module", lambda name: kind)
    spec = copy(SPEC, name="s")
    options = RunOptions(seeds=3, work=tmp_path, say=lambda _: None)
    cells, data = runner.run_table(spec, options)
    (claim,) = judge(spec, cells, data)
    # the exact sign-flip test at 3 seeds: p 0.25; 2 / 2^6 < 5% needs 6 seeds a side
    assert claim["verdict"] == "not resolved: needs about 6 seeds a side"
    trained.clear()
    cells, data, seeds = add_seeds(spec, options, cells, data)
    assert seeds == 6 and sorted(trained) == [(row, s) for row in "ab" for s in (4, 5, 6)]
    (claim,) = judge(spec, cells, data)
    assert claim["verdict"] == "holds" and claim["p"] == pytest.approx(2 / 2 ** 6)
    assert claim["seeds"] == {"a": [1, 2, 3, 4, 5, 6], "b": [1, 2, 3, 4, 5, 6]}
