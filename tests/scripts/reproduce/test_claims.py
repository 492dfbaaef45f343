"""A table's claims from its cells: each refusal with its reason (not run, not meaningful,
still learning, too few seeds), Holm's correction over the claims tested, parity claims,
``verdicts.json`` and the translation kind's no-model reference."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.reproduce.claims import NoModel, judge
from scripts.reproduce.direction import holm, seeds_needed, welch
from scripts.reproduce.report import section, verdicts, write_verdicts
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec

SCORE = Metric("score", "score")
NLL = Metric("valid_nll", "valid nll (bits)", False)
COST = Metric("cost", "cost", False, learned=False)
SPEC = TableSpec(
    name="t", title="t", paper="P", claim="a beats b", kind="translation",
    metrics=(SCORE, NLL, COST),
    rows=(Row("a", "A"), Row("b", "B"), Row("c", "C")),
    comparisons=(Comparison("a", "b", "score", "a beats b"),
                 Comparison("a", "b", "cost", "a is cheaper"),
                 Comparison("a", "c", "score", "a matches c", margin=1.0)))
# a clear gap on every figure: a beats b, a matches c (the same scores)
FIGURES = {"a": (10.0, 4.0, 1.0), "b": (8.0, 5.0, 2.0), "c": (10.0, 4.0, 1.0)}
# each row's figures move with the seed in their own way: the paired differences vary
WOBBLE = {"a": (-0.1, 0.0, 0.1), "b": (0.1, 0.0, -0.1), "c": (0.1, -0.1, 0.0)}


def cells(seeds: int = 3, stopped: str | None = "plateau", rows=("a", "b", "c"),
          **record) -> list:
    found = []
    for key in rows:
        score, nll, cost = FIGURES[key]
        for seed in range(1, seeds + 1):
            wobble = WOBBLE[key][seed - 1]
            result = {"figures": {"score": score + wobble, "valid_nll": nll + wobble,
                                  "cost": cost + wobble, "updates": 400.0}, **record}
            if stopped is not None:
                result["stopped"] = stopped
            found.append(SimpleNamespace(row=SPEC.row(key), seed=seed, result=result,
                                       stale=None))
    return found


def verdict_of(judged: list, claim: str) -> str:
    return next(c["verdict"] for c in judged if c["claim"] == claim)


def test_models_at_a_plateau_get_verdicts_and_a_parity_claim_its_margin():
    judged = judge(SPEC, cells(), {})
    assert [c["verdict"] for c in judged] == ["holds", "holds", "holds"]
    parity = judged[2]
    assert parity["margin"] == 1.0 and parity["difference"] == pytest.approx(0.0, abs=1e-12)
    # paired: a - c per seed is -0.2, 0.1, 0.1 (sample sd sqrt(0.03))
    assert parity["test"] == "paired t-test" and parity["df"] == 2
    assert parity["t"] == pytest.approx(1.0 / math.sqrt(0.03 / 3))
    assert parity["seeds"] == {"a": [1, 2, 3], "c": [1, 2, 3]} and parity["family"] == 3


def test_a_seed_stopped_at_the_cap_still_improving_refuses_quality_claims_only():
    found = cells()
    found[1].result.update(stopped="cap", still_improving=True)  # a, seed 2
    judged = judge(SPEC, found, {})
    assert verdict_of(judged, "a beats b") == ("not resolved: still learning: A, 1 of 3 "
                                               "seeds stopped at the cap after 400 updates, "
                                               "still improving")
    assert verdict_of(judged, "a matches c").startswith("not resolved: still learning: A")
    assert verdict_of(judged, "a is cheaper") == "holds"  # a cost is not learnt
    # the figures are still reported beside the refusal, Holm's p only for tested claims
    assert judged[0]["t"] is not None and judged[0]["p_holm"] is None


def test_a_cell_without_a_stop_reason_was_not_run_to_a_plateau():
    judged = judge(SPEC, cells(stopped=None), {})
    assert verdict_of(judged, "a beats b") == ("not resolved: still learning: A, 3 of 3 seeds "
                                               "stopped after 400 updates without a plateau "
                                               "(a fixed budget)")
    assert verdict_of(judged, "a is cheaper") == "holds"
    # a seed at the cap beside one without a record: each counted as what it is
    mixed = cells()
    mixed[0].result.update(stopped="cap")
    del mixed[1].result["stopped"]
    assert verdict_of(judge(SPEC, mixed, {}), "a beats b") == (
        "not resolved: still learning: A, 1 of 3 seeds stopped at the cap after 400 updates; "
        "1 without a recorded stop (a fixed budget)")


def test_a_row_that_reads_no_model_makes_its_claims_not_meaningful():
    # b's valid nll (5.0) is at the target's unigram entropy: it has learnt nothing
    entropy = {"b": [NoModel(NLL, 5.0, "the target side's unigram entropy")]}
    judged = judge(SPEC, cells(stopped="cap"), {"no_model": entropy})
    assert verdict_of(judged, "a beats b") == ("not meaningful: B's valid nll (bits) 5.00 is "
                                               "at or above 5.00, the target side's unigram "
                                               "entropy")
    assert verdict_of(judged, "a is cheaper") == "holds"
    # a ROUGE at or below the trivial output's, on any metric of the row
    trivial = {"a": [NoModel(Metric("score", "ROUGE-1"), 10.0, "the trivial output's")]}
    judged = judge(SPEC, cells(), {"no_model": trivial})
    assert verdict_of(judged, "a matches c").startswith("not meaningful: A's ROUGE-1 10.00 is "
                                                        "at or below 10.00")
    below = {"a": [NoModel(NLL, 4.5, "entropy"), NoModel(SCORE, 9.9, "trivial")]}
    assert verdict_of(judge(SPEC, cells(), {"no_model": below}), "a beats b") == "holds"


def test_fewer_than_three_seeds_or_a_row_not_run_get_no_verdict():
    judged = judge(SPEC, cells(seeds=2), {})
    assert all(c["verdict"] == "not resolved: fewer than 3 seeds a side (2 and 2)"
               for c in judged)
    judged = judge(SPEC, cells(rows=("a", "b")), {})
    assert verdict_of(judged, "a matches c") == "not run"
    assert verdict_of(judged, "a beats b") == "holds"
    diverged = cells()
    for cell in diverged[3:6]:  # every seed of b diverged
        cell.result["figures"] = {"diverged": 1.0, "reason": "nan"}
    judged = judge(SPEC, diverged, {})  # costs too: it has no model to measure
    assert verdict_of(judged, "a beats b") == "not resolved: B diverged on every seed"
    assert verdict_of(judged, "a is cheaper") == "not resolved: B diverged on every seed"
    assert verdict_of(judged, "a matches c") == "holds"


def test_a_seed_whose_record_lacks_the_figure_gets_no_verdict_on_it():
    # a cost measured only since some cells finished (decoding CPU seconds): a's seed 3 has
    # none, so the cost claim is refused rather than tested on 2 seeds against 3
    found = cells()
    del found[2].result["figures"]["cost"]
    judged = judge(SPEC, found, {})
    assert verdict_of(judged, "a is cheaper") == ("not resolved: A has no cost on 1 of 3 seeds "
                                                  "(finished before it was measured)")
    assert verdict_of(judged, "a beats b") == "holds"
    # a figure recorded as NaN (a decoding that failed) is a seed left out, as before
    found = cells()
    found[2].result["figures"]["cost"] = math.nan
    assert verdict_of(judge(SPEC, found, {}), "a is cheaper") == (
        "not resolved: fewer than 3 seeds a side (2 and 3)")


def test_a_time_measured_beside_other_steps_gets_no_verdict_where_it_must_be_alone():
    # a decoding time is compared only where its timed step ran with the others paused
    spec = replace(SPEC, metrics=(SCORE, NLL, replace(COST, alone=True)))
    found = cells(timed_alone=True)
    del found[4].result["timed_alone"]  # b's seed 2 decoded beside other jobs
    judged = judge(spec, found, {})
    assert verdict_of(judged, "a is cheaper") == (
        "not resolved: B's cost was measured beside other jobs on 1 of 3 seeds (before timed "
        "steps ran alone)")
    assert verdict_of(judged, "a beats b") == "holds"  # a learned figure: no matter
    assert verdict_of(judge(spec, cells(timed_alone=True), {}), "a is cheaper") == "holds"
    assert verdict_of(judge(SPEC, found, {}), "a is cheaper") == "holds"  # not a timed cost


def test_holm_corrects_over_every_claim_of_the_table_tested_or_not():
    # a beats b by a gap with p about 0.03 alone (unpaired seeds: Welch); two such claims
    # make a family of two, and neither holds
    figures = {"a": [10.0, 10.6, 9.4], "b": [8.6, 9.2, 8.0]}
    p = welch(figures["a"], figures["b"]).p
    assert 0.025 < p < 0.05
    spec = TableSpec(name="h", title="h", paper="P", claim="-", kind="translation",
                     metrics=(SCORE, Metric("other", "other")), rows=SPEC.rows[:2],
                     comparisons=(Comparison("a", "b", "score", "one"),
                                  Comparison("a", "b", "other", "two")))
    found = [SimpleNamespace(row=spec.row(key), seed=i + 1 + 3 * (key == "b"), stale=None,
                             result={"figures": {"score": v, "other": v}, "stopped": "plateau"})
             for key, values in figures.items() for i, v in enumerate(values)]
    judged = judge(spec, found, {})
    assert [c["test"] for c in judged] == ["Welch t-test"] * 2
    assert [c["p_holm"] for c in judged] == pytest.approx(holm([p, p]))
    # the seeds for 80% power at the family's Bonferroni level, 5% / 2
    needed = seeds_needed(welch(figures["a"], figures["b"]), (0.6, 0.6), 0.025)
    assert needed >= seeds_needed(welch(figures["a"], figures["b"]), (0.6, 0.6), 0.05)
    assert [c["verdict"] for c in judged] == [f"not resolved: needs about {needed} seeds "
                                              "a side"] * 2
    assert [c["seeds_needed"] for c in judged] == [needed] * 2
    # a refused claim still counts in the family (as p = 1): the other keeps its Holm p,
    # 2p, so that its verdict does not change when the first becomes testable
    found[0].result["stopped"] = "cap"
    spec_cost = replace(spec, metrics=(SCORE, Metric("other", "other", learned=False)))
    judged = judge(spec_cost, found, {})
    assert judged[0]["verdict"].startswith("not resolved: still learning")
    assert [c["family"] for c in judged] == [2, 2]
    assert judged[1]["p_holm"] == pytest.approx(2 * p)
    assert judged[1]["verdict"].startswith("not resolved: needs about")
    found[0].result["stopped"] = "plateau"
    judged_again = judge(spec_cost, found, {})  # the first claim testable: the same family
    assert [c["family"] for c in judged_again] == [2, 2]
    assert judged_again[1]["p_holm"] == pytest.approx(2 * p)


def test_a_diverged_seed_is_shown_in_the_table_and_refuses_the_row_s_claims():
    found = cells()
    found[4].result["figures"] = {"diverged": 1.0, "reason": "nan"}  # b, seed 2
    judged = judge(SPEC, found, {})
    assert verdict_of(judged, "a beats b") == ("not resolved: B diverged on 1 of 3 seeds "
                                               "(seed 2)")
    assert verdict_of(judged, "a is cheaper") == verdict_of(judged, "a beats b")
    text = section(SPEC, found, {}, "toy", 3, "cmd")
    b_line = next(line for line in text.splitlines() if line.startswith("| B |"))
    assert b_line.endswith("| 2 (+1 diverged) |")


def test_verdicts_json_keeps_rows_seeds_and_claims(tmp_path):
    found = cells(stopped="cap", still_improving=False, lr=0.005,
                  lr_grid=[[0.0025, 5.1], [0.005, 4.9], [0.01, 5.3]],
                  curve=[[100, 6.0], [200, 5.0]], commit="abc1234")
    found[3].lr = 0.0025  # the runner keeps the rate it chose for a row on the row's cells
    entry = verdicts(SPEC, found, {}, "toy", 3)
    assert set(entry["rows"]) == {"a", "b", "c"}
    a = entry["rows"]["a"]
    assert a["lr"] == 0.005 and a["lr_grid"][1] == [0.005, 4.9]
    assert entry["rows"]["b"]["lr"] == 0.0025
    assert a["seeds"][0] == {"seed": 1, "stopped": "cap", "still_improving": False,
                             "updates": 400.0, "curve": [[100, 6.0], [200, 5.0]],
                             "figures": {"score": 9.9, "valid_nll": 3.9, "cost": 0.9},
                             "commit": "abc1234"}
    claim = entry["claims"][0]
    assert set(claim) >= {"claim", "rows", "metric", "verdict", "t", "df", "p", "margin"}
    assert all(row in entry["rows"] for c in entry["claims"] for row in c["rows"])
    store = tmp_path / "reproduction" / "verdicts.json"
    # two tables written at once both land
    threads = [threading.Thread(target=write_verdicts, args=(store, name, entry))
               for name in ("one", "two", "three")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = json.loads(store.read_text())
    assert set(stored) == {"one", "two", "three"}
    assert stored["one"]["claims"][1]["verdict"] == "holds"
    assert sorted(p.name for p in store.parent.iterdir()) == [".verdicts.json.lock",
                                                             "verdicts.json"]


def test_the_translation_reference_is_the_targets_unigram_entropy(tmp_path: Path):
    from scripts.reproduce.kinds.translation import no_model, reference_line

    for name, train, valid in (("sentences", "a a b\nb c\n", "a d\n"),
                               ("docs64", "a a a\n", "a\n")):
        (tmp_path / "bin" / name).mkdir(parents=True)
        (tmp_path / "raw" / name).mkdir(parents=True)
        (tmp_path / "bin" / name / "dict.en.txt").write_text("a 3\nb 2\n")
        (tmp_path / "raw" / name / "train.en").write_text(train)
        (tmp_path / "raw" / name / "valid.en").write_text(valid)
    spec = TableSpec(name="t", title="t", paper="P", claim="-", kind="translation",
                     metrics=(NLL,), rows=(Row("s", "S"), Row("d", "D", point={"length": 64}),
                                           Row("x", "X", point={"length": 512})))
    found = no_model(spec, tmp_path)
    assert set(found) == {"s", "d"}  # no data at 512: no reference
    # sentences: train counts a 2, b 2, <unk> 1 (c is not in the dictionary), </s> 2: 7
    # tokens; V = 2 words + 4 specials = 6; valid "a <unk> </s>": add-one unigrams
    expected = -(math.log2(3 / 13) + math.log2(2 / 13) + math.log2(3 / 13)) / 3
    assert found["s"][0].value == pytest.approx(expected, rel=1e-12)
    assert found["s"][0].metric.key == "valid_nll" and not found["s"][0].metric.higher_is_better
    assert found["d"][0].value == pytest.approx(-(math.log2(4 / 10) + math.log2(2 / 10)) / 2,
                                                rel=1e-12)
    # the report prints the figure beside the table, once per data set
    line = reference_line(spec, found)
    assert f"{expected:.2f} bits on sentences" in line
    assert f"{found['d'][0].value:.2f} bits on documents of 64 tokens" in line
    assert "512" not in line
    assert reference_line(spec, {}) is None


def test_a_new_verdict_is_shown_beside_the_one_it_replaces(tmp_path):
    from scripts.reproduce.__main__ import note_replaced
    from scripts.reproduce.report import section

    doc = tmp_path / "reproduction.md"
    store = tmp_path / "reproduction" / "verdicts.json"
    write_verdicts(store, "t", {"claims": [{"claim": "a beats b", "verdict": "reversed"},
                                           {"claim": "a is cheaper", "verdict": "holds"}]})
    entry = verdicts(SPEC, cells(stopped=None), {}, "toy", 3)
    replaced = note_replaced(doc, "t", entry)
    assert replaced == {"a beats b": "reversed"}  # the unchanged and the new claim: nothing
    text = section(SPEC, cells(stopped=None), {}, "toy", 3, "cmd", previous=replaced)
    assert "| verdict | replaces |" in text
    assert ("| not resolved: still learning: A, 3 of 3 seeds stopped after 400 updates without "
            "a plateau (a fixed budget) | reversed |") in text
    # a rerun with the same verdicts keeps showing what the first one replaced
    write_verdicts(store, "t", entry)
    again = verdicts(SPEC, cells(stopped=None), {}, "toy", 3)
    assert note_replaced(doc, "t", again) == {"a beats b": "reversed"}
    assert "replaces" not in section(SPEC, cells(), {}, "toy", 3, "cmd")


def test_not_run_is_not_a_verdict_a_claim_replaces(tmp_path):
    """A table reported as *not run* between two runs: its claims' new verdicts replace the
    verdicts before *not run*, which the not-run report kept."""
    from scripts.reproduce.__main__ import note_replaced

    doc = tmp_path / "reproduction.md"
    write_verdicts(tmp_path / "reproduction" / "verdicts.json", "t", {"claims": [
        {"claim": "a beats b", "verdict": "not run", "replaces": "reversed"},
        {"claim": "a is cheaper", "verdict": "not run"}]})
    entry = verdicts(SPEC, cells(stopped=None), {}, "toy", 3)
    assert entry["claims"][0]["verdict"] != "not run"
    assert note_replaced(doc, "t", entry) == {"a beats b": "reversed"}


def test_stale_is_not_a_verdict_a_claim_replaces(tmp_path):
    """Rows waiting to be trained again (*stale*) between two runs: the new verdict replaces
    the one before *stale*; a replaced verdict equal to the new one is not shown."""
    from scripts.reproduce.__main__ import note_replaced

    doc = tmp_path / "reproduction.md"
    entry = verdicts(SPEC, cells(stopped=None), {}, "toy", 3)
    new = entry["claims"][0]["verdict"]
    write_verdicts(tmp_path / "reproduction" / "verdicts.json", "t", {"claims": [
        {"claim": "a beats b", "verdict": "not resolved: stale: A seed 2 started from an "
         "older model", "replaces": "reversed"},
        {"claim": "a is cheaper", "verdict": "not resolved: stale: A seed 1 ...",
         "replaces": entry["claims"][1]["verdict"]}]})
    assert note_replaced(doc, "t", entry) == {"a beats b": "reversed"}
    assert entry["claims"][0]["replaces"] == "reversed" != new
    assert "replaces" not in entry["claims"][1]


def test_the_closing_note_lists_each_verdict_beside_the_one_it_replaces():
    from scripts.reproduce.report import summary_section

    entry = {"paper": "P", "scale": "toy", "seeds": 3, "cells": "9 of 9",
             "claims": [{"claim": "a beats b", "verdict": "not resolved: still learning",
                         "replaces": "reversed"}, {"claim": "a is cheaper", "verdict": "holds"}]}
    text = summary_section({"t": entry}, [SPEC])
    assert "| table | paper's claim | verdict | replaces | run |" in text
    assert ("| `t` (P) | a beats b | not resolved: still learning | reversed | toy, 3 seed(s), "
            "9 of 9 cells |") in text
    assert "| `t` (P) | a is cheaper | holds | - |" in text
    assert "| `t` (P) | a beats b | not yet run at toy scale in this repository | - | - |" in \
        summary_section({}, [SPEC])


def test_the_section_shows_how_each_row_learnt_and_the_json_stays_strict(tmp_path):
    from scripts.reproduce.report import section

    found = cells(stopped="plateau", lr=0.005, lr_grid=[[0.0025, 5.1], [0.005, 4.9],
                                                        [0.01, float("nan")]])
    found[4].result.update(stopped="cap", updates=520.0)  # b, seed 2
    found[0].result["figures"]["score"] = float("nan")  # a seed without a score
    text = section(SPEC, found[:6], {}, "toy", 3, "cmd")  # c not run: not listed
    assert "| row | rate | rate grid (seed 1's valid nll) | stopped | updates |" in text
    assert "| C |" not in text.split("rate grid")[1]
    assert "| A | 0.005 | 0.0025: 5.10, 0.005: 4.90, 0.01: - | 3 plateau | 400 |" in text
    assert "| B | 0.005 | 0.0025: 5.10, 0.005: 4.90, 0.01: - | 1 cap, 2 plateau | 400-520 |" in text
    store = tmp_path / "verdicts.json"
    write_verdicts(store, "t", verdicts(SPEC, found, {}, "toy", 3))
    stored = json.loads(store.read_text())  # strict JSON: no NaN
    assert "NaN" not in store.read_text()
    assert stored["t"]["rows"]["a"]["seeds"][0]["figures"]["score"] is None
    assert stored["t"]["rows"]["a"]["lr_grid"][2] == [0.01, None]
    # cells trained before any of it was recorded: no such table
    assert "rate grid" not in section(SPEC, cells(stopped=None), {}, "toy", 3, "cmd")


def test_a_row_whose_grid_finished_before_any_seed_shows_its_rate_and_grid(tmp_path):
    from scripts.reproduce.report import section

    grid = [[0.00125, 4.77], [0.0025, 3.69], [0.005, 3.05], [0.01, 3.40]]
    found = cells(rows=("a",), lr=0.01, lr_grid=[[0.01, 4.0]])
    # b: its grid finished (the runner marks its planned cells), none of its seeds yet; c: its
    # grid not finished, a best rate so far: not shown
    found += [SimpleNamespace(row=SPEC.row("b"), seed=seed, result=None, lr=0.005,
                              lr_grid=grid, rate_chosen=True) for seed in (1, 2, 3)]
    found += [SimpleNamespace(row=SPEC.row("c"), seed=seed, result=None, lr=0.0025,
                              lr_grid=grid[:2], rate_chosen=False) for seed in (1, 2, 3)]
    text = section(SPEC, found, {}, "toy", 3, "cmd")
    assert "| B | 0.005 | 0.00125: 4.77, 0.0025: 3.69, 0.005: 3.05, 0.01: 3.40 | - | - |" in text
    assert "| C |" not in text.split("rate grid")[1]
    rows = verdicts(SPEC, found, {}, "toy", 3)["rows"]
    assert rows["b"] == {"label": "B", "lr": 0.005, "lr_grid": grid, "seeds": []}
    assert rows["c"] == {"label": "C", "lr": None, "lr_grid": [], "seeds": []}
    # a table none of whose cells has finished still shows the rows whose grid has
    assert "| B | 0.005 |" in section(SPEC, found[3:], {}, "toy", 3, "cmd")


def test_the_classification_reference_predicts_the_most_frequent_training_class(tmp_path):
    from scripts.reproduce.kinds.classification import no_model, reference_line
    from scripts.reproduce.tables.sparse_softmax_classification import SPEC as CLASSES

    (tmp_path / "train.label").write_text("a\na\nb\nc\n")
    (tmp_path / "test.label").write_text("a\nb\nb\nc\n")
    found = {reference.metric.key: reference.value for reference in no_model(CLASSES, tmp_path)}
    # "a" for all four: one right; micro-F1 2*1 / (2*1 + 3 + 3) = 25%; per-class F1 a 2/(2+3)
    # = 0.4, b 0, c 0: macro-F1 0.4 / 3
    assert found == pytest.approx({"micro_f1": 25.0, "macro_f1": 40.0 / 3}, rel=1e-12)
    line = reference_line(no_model(CLASSES, tmp_path))
    assert "micro-F1 25.00, macro-F1 13.33" in line


def test_the_falling_trend_test_against_a_float64_formula():
    from scipy import stats

    from scripts.reproduce.direction import falling

    points = [[100, 2.40], [242, 2.36], [384, 2.34], [526, 2.33], [668, 2.34], [810, 2.32],
              [952, 2.33], [1094, 2.32]]
    want = stats.linregress([x for x, _ in points], [y for _, y in points])
    got = falling(points)
    assert got.slope == pytest.approx(want.slope, rel=1e-12) and got.df == 6
    assert got.p == pytest.approx(want.pvalue / 2, rel=1e-9)  # one-sided, the slope < 0
    rising = falling([[x, -y] for x, y in points])
    assert rising.p == pytest.approx(1 - want.pvalue / 2, rel=1e-9)
    assert falling([[0, 3.0], [1, 2.0], [2, 1.0]]).p == 0.0  # exact falling line
    assert math.isnan(falling([[0, 1.0], [1, 0.5]]).p)


def test_a_plateau_stop_while_the_loss_still_falls_refuses_quality_claims():
    # the patience rule stopped a on noise: its last 8 validations still fall clearly
    falling_curve = [[142 * i, 3.0 - 0.01 * i + (0.015 if i % 2 else 0.0)] for i in range(20)]
    flat_curve = [[142 * i, 2.0 + (0.01 if i % 3 else 0.0)] for i in range(20)]
    found = cells(stopped="plateau", curve=flat_curve)
    judged = judge(SPEC, found, {})
    assert verdict_of(judged, "a beats b") == "holds"
    for cell in found:
        if cell.row.key == "a" and cell.seed == 2:
            cell.result["curve"] = falling_curve
    why = verdict_of(judge(SPEC, found, {}), "a beats b")
    assert why.startswith("not resolved: still learning: A, 1 of 3 seeds stopped by the "
                          "patience rule while the valid loss still fell over their last 8 "
                          "validations") and "6 df" in why
    # a table that stops on its score (a synthetic study, recording (step, loss, score)) is
    # not judged by the valid-loss trend: its training loss falls long after its score is full
    for cell in found:
        cell.result["curve"] = [[step, loss, 100.0] for step, loss in falling_curve]
    score_stop = replace(SPEC, valid_loss_stop=False)
    assert verdict_of(judge(score_stop, found, {}), "a beats b") == "holds"


def test_a_paired_claim_says_where_the_same_seed_gave_other_initial_weights():
    found = cells()
    for cell in found:  # c has more parameters than a: its weights start elsewhere
        cell.result["figures"]["params"] = 1000.0 + 24 * (cell.row.key == "c")
    judged = judge(SPEC, found, {})
    assert judged[0]["initial_weights"] == "shared"
    assert judged[2]["initial_weights"] == "differ: 1,000 and 1,024 parameters"
    assert "paired t-test; initial weights differ: 1,000 and 1,024 parameters" in section(
        SPEC, found, {}, "toy", 3, "cmd")
    started = replace(SPEC, rows=(Row("a", "A", parent="x:a"), Row("b", "B", parent="x:b"),
                                  Row("c", "C", parent="x:a")))
    judged = judge(started, [replace_row(cell, started) for cell in found], {})
    assert judged[0]["initial_weights"] == "differ: each row starts from its own model"
    assert judged[2]["initial_weights"] == "shared: the same starting model"


def replace_row(cell, spec):
    return SimpleNamespace(**{**vars(cell), "row": spec.row(cell.row.key)})
