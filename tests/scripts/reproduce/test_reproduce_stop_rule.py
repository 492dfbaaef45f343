"""The protocol's stop rule (``scripts/reproduce/stop_rule.py``): a spent ``--patience`` stops a
training only once its last validations no longer fall. Checked against scipy's least-squares
fit on fairseq's own ``should_stop_early``, and in the log reading (a stop overruled after it is
no stop); and the runner runs again a child cell that finished before its parent's result."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from scipy.stats import linregress

from scripts.reproduce import patient_train, stop_rule
from scripts.reproduce.claims import judge
from scripts.reproduce.kinds import Step
from scripts.reproduce.log_figures import ERROR, NLL, training_record
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import Comparison, Metric, Row, TableSpec

P = 4  # the toy tables' patience
W = stop_rule.window(P)


def falls(nlls, size: int = W) -> bool:
    """The reference: scipy's one-sided p of a negative slope over the last ``size`` points."""
    points = nlls[-size:]
    if len(points) < size:
        return False
    fit = linregress(range(len(points)), points, alternative="less")
    return fit.pvalue < stop_rule.ALPHA


def test_the_trend_is_scipys_one_sided_least_squares_test():
    falling = [[100 * i, 5.0 - 0.1 * i + 0.05 * (-1) ** i] for i in range(12)]
    flat = [[100 * i, 3.0 + 0.05 * (-1) ** i] for i in range(12)]
    assert stop_rule.still_falling(falling, P) and falls([y for _, y in falling])
    assert not stop_rule.still_falling(flat, P) and not falls([y for _, y in flat])
    fit = linregress([x for x, _ in falling[-W:]], [y for _, y in falling[-W:]],
                     alternative="less")
    found = stop_rule.trend(falling, P)
    assert found.slope == pytest.approx(fit.slope, rel=1e-12)
    assert found.p == pytest.approx(fit.pvalue, rel=1e-9) and found.df == W - 2
    assert not stop_rule.still_falling(falling[:W - 1], P)  # too short to test
    assert W == 8 and stop_rule.window(2) == 4 and stop_rule.window(None) == 8


def test_a_stop_overruled_after_it_is_no_stop(tmp_path):
    early = f"INFO | fairseq_cli.train | {stop_rule.EARLY_STOP} for last 4 runs\n"
    done = f"INFO | fairseq_cli.train | {stop_rule.DONE} 3.0 seconds\n"
    overrule = f"INFO | {stop_rule.GOES_ON} at update 80: the training goes on\n"
    assert stop_rule.stopped_at_plateau(early + done) and stop_rule.finished(early + done)
    assert not stop_rule.stopped_at_plateau(early + overrule)
    assert not stop_rule.finished(early + done + overrule)
    assert stop_rule.stopped_at_plateau(early + overrule + early + done)
    assert not stop_rule.stopped_at_plateau(done)
    # read from a log: overruled, then ended by the epoch cap, the training stopped at its cap
    valid = "".join(valid_line(update, nll) for update, nll in ((10, 5.0), (20, 4.0)))
    log = tmp_path / "train.log"
    log.write_text(valid + early + overrule + done)
    assert training_record(log, 2)["stopped"] == "cap"
    log.write_text(valid + early + overrule + early + done)
    assert training_record(log, 2)["stopped"] == "plateau"


@pytest.mark.parametrize("maximize", [False, True])
def test_a_spent_patience_stops_only_once_the_loss_no_longer_falls(maximize, monkeypatch,
                                                                  caplog):
    """fairseq's own ``should_stop_early`` (its state on the wrapper, as fairseq reads it)
    under the rule: it stops at the first validation whose patience is spent and whose last
    W validations do not fall by scipy's test, and logs each overrule before it. The same for
    a classifier's accuracy, which fairseq maximises, read as the error rate 100 - accuracy
    (here the same curve as the nlls)."""
    from fairseq_cli import train

    nlls = [9.0, 8.0, 7.0, 6.0, 5.0, 4.5, 4.0, 4.2, 4.1, 4.05, 4.02,  # patience spent, falling
            3.9, 3.95, 4.0, 3.93, 3.92,  # a new best, then spent again, still falling
            3.92, 3.93, 3.91, 3.94, 3.92, 3.93, 3.95, 3.94]  # flat: stops where it no longer falls
    validations = patient_train.Validations()
    validations.trainer = SimpleNamespace(get_num_updates=lambda: 50 * len(validations.curve)
                                          + 50)
    validations.metric = ERROR if maximize else NLL
    monkeypatch.setattr(train, "should_stop_early",
                        patient_train.trend_aware(train.should_stop_early, validations))
    cfg = SimpleNamespace(checkpoint=SimpleNamespace(patience=P,
                                                     maximize_best_checkpoint_metric=maximize))
    caplog.set_level(logging.INFO)
    stopped_at, overruled = None, []
    for i, nll in enumerate(nlls):
        logged = caplog.text.count(stop_rule.GOES_ON)
        if train.should_stop_early(cfg, 100.0 - nll if maximize else nll):  # fairseq's value
            stopped_at = i
            break
        if caplog.text.count(stop_rule.GOES_ON) > logged:
            overruled.append(i)
    # the reference: fairseq's count and scipy's test, replayed
    best, since, expected, spent = None, 0, None, []
    for i, nll in enumerate(nlls):
        best, since = (nll, 0) if best is None or nll < best else (best, since + 1)
        if since >= P:
            if not falls(nlls[:i + 1]):
                expected = i
                break
            spent.append(i)
    assert spent and expected is not None and expected > spent[-1]
    assert stopped_at == expected and overruled == spent
    assert [update for update, _ in validations.curve] == [
        50 * (i + 1) for i in range(expected + 1)]
    assert [value for _, value in validations.curve] == pytest.approx(nlls[:expected + 1])
    assert caplog.text.count(stop_rule.GOES_ON) == len(spent)
    # no validation in an epoch: no point, and fairseq's answer
    assert not train.should_stop_early(cfg, None) and len(validations.curve) == expected + 1


def valid_line(update: int, nll: float) -> str:
    record = {"epoch": 1, "valid_nll_loss": str(nll), "valid_num_updates": str(update)}
    return f"2026-01-01 00:00:00 | INFO | valid | {json.dumps(record)}\n"


# a training that an earlier rule stopped at update 80 while its valid nll still fell, and that
# resumed from its checkpoint validates on a flat curve until its patience ends it; one that
# starts from a parent's best checkpoint (named in its log) validates on the flat curve too
FIRST = [(10 * (i + 1), nll) for i, nll in enumerate([8, 7, 6, 5, 4, 3, 3.2, 3.1])]
THEN = [(80 + 10 * (i + 1), nll) for i, nll in enumerate(
    [2.9, 3.0, 2.95, 2.92, 3.0, 2.93, 2.96, 2.94])]
TRAINING = f"""
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
resumed = (folder / "checkpoint_last.pt").is_file()
print("resumed" if resumed else "from scratch")
parent = sys.argv[2:] and pathlib.Path(sys.argv[2])
if parent:
    print("starts from the parent's " + (parent / "checkpoint_best.pt").read_text())
for update, nll in {THEN!r} if resumed or parent else {FIRST!r}:
    record = {{"epoch": 1, "valid_nll_loss": str(nll), "valid_num_updates": str(update)}}
    print("INFO | valid | " + json.dumps(record))
print("INFO | fairseq_cli.train | {stop_rule.EARLY_STOP} for last 4 runs")
print("INFO | fairseq_cli.train | {stop_rule.DONE} 1.0 seconds")
(folder / "checkpoint_last.pt").write_text("saved")
(folder / "checkpoint_best.pt").write_text("model trained on" if resumed else "first model")
"""


def fake_kind(calls: list):
    def steps(spec, row, seed, scale, settings, data, folder, parent):
        calls.append(row.key)
        return [Step("train.log", argv=[sys.executable, "-c", TRAINING, str(folder)]
                     + ([str(parent)] if parent else []), trains=True)]

    return SimpleNamespace(
        prepare=lambda spec, scale, settings, work, say: {"description": "fake"},
        cell_settings=lambda spec, row, seed, scale, settings, data: {"row": row.key,
                                                                      "seed": seed},
        steps=steps, collect=lambda spec, row, folder: {"valid_nll": 1.0, "bleu": 1.0})


def fake_table(monkeypatch, tmp_path, calls: list, said: list) -> tuple[TableSpec, RunOptions]:
    """A one-row table of the fake training (each training's row into ``calls``, what the
    runner says into ``said``) and the options of a call that trains it."""
    from scripts.reproduce import cell_plan, runner

    for module in (runner, cell_plan):
        monkeypatch.setattr(module, "kind_module", lambda name: fake_kind(calls))
    spec = TableSpec(name="fake", title="-", paper="-", claim="-", kind="translation",
                     metrics=(Metric("bleu", "BLEU"),), rows=(Row("a", "A"),),
                     toy={"patience": P})
    return spec, RunOptions(seeds=1, work=tmp_path, say=said.append)


def child_table(monkeypatch, tmp_path, calls: list, said: list) -> tuple[TableSpec, RunOptions]:
    """The fake table with a row ``b`` that starts from row ``a``, and a claim on both."""
    spec, options = fake_table(monkeypatch, tmp_path, calls, said)
    return replace(spec, rows=(Row("a", "A"), Row("b", "B", parent="a")), comparisons=(
        Comparison("b", "a", "bleu", "B beats A"),)), options


def log_of(cell) -> str:
    return (cell.folder / "train.log").read_text()


def trained_again(cell, after) -> None:
    """As if ``cell`` trained again after ``after`` finished (its record replaced by a
    training that differed): its result finishes later, and its model is another."""
    stored = cell.folder / "result.json"
    result = json.loads(stored.read_text())
    later = round(after.result["finished_at"] + 0.1, 1)  # kept to 0.1 s, as a record's
    stored.write_text(json.dumps({**result, "finished_at": later}))
    (cell.folder / "checkpoint_best.pt").write_text("model trained on")
    # a rerun after this is stamped with the clock: let the clock pass the made-up time first
    time.sleep(max(0.0, later + 0.05 - time.time()))


def test_a_child_that_finished_before_its_parent_was_trained_on_runs_again(monkeypatch,
                                                                             tmp_path):
    calls: list = []
    said: list = []
    spec, options = child_table(monkeypatch, tmp_path, calls, said)
    (a, b), _ = run_table(spec, options)
    assert calls == ["a", "b"] and "the parent's first model" in log_of(b)
    trained_again(a, b)
    old = b.folder
    # collected: b's result is of a model that started from a's older model
    (a, b), data = run_table(spec, replace(options, collect_only=True))
    assert b.result is not None and calls == ["a", "b"]
    (claim,) = judge(spec, [a, b], data)
    assert claim["verdict"] == ("not resolved: stale: B seed 1 started from an older model of "
                                "a, trained on after it")
    # a call that trains runs b again, from a's model trained on, its old folder kept aside
    said.clear()
    (a, b), data = run_table(spec, options)
    assert calls == ["a", "b", "b"] and b.folder == old
    aside = old.with_name(old.name + ".stale-1")
    assert f"  b seed 1 runs again: it started from an older model of a, trained on after it; " \
        f"its old folder {old} is kept as {aside}" in said
    assert "the parent's first model" in (aside / "train.log").read_text()
    assert (aside / "result.json").is_file() and (aside / "checkpoint_last.pt").is_file()
    assert "resumed" not in log_of(b) and "the parent's model trained on" in log_of(b)
    # kept to 0.1 s: a fake training can finish within a's tenth, and equal is not stale
    assert b.result["finished_at"] >= a.result["finished_at"]
    assert not judge(spec, [a, b], data)[0]["verdict"].startswith("not resolved: stale")
    run_table(spec, options)  # b finished after a now: cached
    assert calls == ["a", "b", "b"]


def test_a_stale_child_runs_again(monkeypatch, tmp_path):
    """A child whose record finished before its parent's runs again (a dry run says so); one
    without ``finished_at`` is not judged."""
    calls: list = []
    said: list = []
    spec, options = child_table(monkeypatch, tmp_path, calls, said)
    (a, b), _ = run_table(spec, options)
    stored = b.folder / "result.json"
    record = json.loads(stored.read_text())
    stored.write_text(json.dumps({k: v for k, v in record.items() if k != "finished_at"}))
    said.clear()
    run_table(spec, replace(options, dry_run=True))
    assert not any("would run again" in line for line in said), said
    stored.write_text(json.dumps({**record, "finished_at": a.result["finished_at"] - 1}))
    said.clear()
    run_table(spec, replace(options, dry_run=True))
    assert said.count("    (cached, but it would run again: it started from an older model of "
                      "a, trained on after it; its old folder is kept aside)") == 1, said
    del calls[:]  # (a dry run builds the steps it prints)
    (a, b), _ = run_table(spec, options)
    assert calls == ["b"] and "the parent's first model" in log_of(b)
    assert (b.folder.with_name(b.folder.name + ".stale-1") / "train.log").is_file()
