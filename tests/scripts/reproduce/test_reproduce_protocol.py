"""The training protocol of the reproduction tables: a validation curve and a stop reason read
from fairseq-train's log, a stopped training resumed from its own checkpoint."""

from __future__ import annotations

import sys

import pytest

from scripts.reproduce.kinds import Step
from scripts.reproduce.log_figures import train_figures, training_record
from scripts.reproduce.runner import run_step


def fairseq_log(valid: list, stopped_early: bool = False, done: bool = True) -> str:
    """A fairseq-train json log with one training record and ``valid`` = [(update, nll)]."""
    lines = ['2026-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "loss": "9.1", '
             '"nll_loss": "8.5", "num_updates": "10"}']
    for update, nll in valid:
        lines.append('2026-01-01 00:00:02 | INFO | valid | {"epoch": 1, "valid_loss": "9.9", '
                     f'"valid_nll_loss": "{nll}", "valid_num_updates": "{update}"}}')
    if stopped_early:
        lines.append("2026-01-01 00:00:03 | INFO | fairseq_cli.train | early stop since valid "
                     "performance hasn't improved for last 2 runs")
    if done:
        lines.append("2026-01-01 00:00:04 | INFO | fairseq_cli.train | done training in 3.0 "
                     "seconds")
    return "\n".join(lines) + "\n"


def test_a_plateau_and_a_cap_are_told_apart(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(fairseq_log([(5, 6.0), (10, 5.0), (15, 5.2), (20, 5.1)], stopped_early=True))
    record = training_record(log, patience=2)
    assert record == {"curve": [[5, 6.0], [10, 5.0], [15, 5.2], [20, 5.1]], "updates": 20,
                      "stopped": "plateau", "still_improving": False}
    # the decoded model is the best validated one: its valid nll is the table's
    assert train_figures(log)["valid_nll"] == 5.0 and train_figures(log)["updates"] == 20
    # the same curve stopped by the budget: the best is 2 validations back, not within 1
    log.write_text(fairseq_log([(5, 6.0), (10, 5.0), (15, 5.2), (20, 5.1)]))
    assert training_record(log, patience=1)["stopped"] == "cap"
    assert not training_record(log, patience=1)["still_improving"]
    assert training_record(log, patience=3)["still_improving"]
    log.write_text(fairseq_log([(400, 6.9)]))  # a fixed budget validated once, at its end
    assert training_record(log, patience=None)["still_improving"]


def test_a_resumed_log_keeps_one_curve(tmp_path):
    """Killed after validating at 15 but before saving: the run resumes from update 10, so
    its second 15 replaces the first."""
    log = tmp_path / "train.log"
    log.write_text(fairseq_log([(5, 6.0), (10, 5.5), (15, 5.3)], done=False)
                   + fairseq_log([(15, 5.25), (20, 5.1)]))
    assert training_record(log, patience=2)["curve"] == [[5, 6.0], [10, 5.5], [15, 5.25],
                                                         [20, 5.1]]


def fake_training(tmp_path, finishes: bool) -> Step:
    """A training step that logs one line (and the fairseq's last line if it ``finishes``)."""
    code = "print('trained a bit')" + ("; print('done training in 1.0 seconds')" if finishes
                                       else "")
    return Step("train.log", argv=[sys.executable, "-c", code], trains=True)


def test_a_stopped_training_continues_after_its_log_and_a_finished_one_is_not_rerun(tmp_path):
    (tmp_path / "train.log").write_text("the first part\n")
    (tmp_path / "train.log.cpu").write_text("2.5\n")
    # no checkpoint: fairseq starts afresh, and so does the log
    run_step(fake_training(tmp_path, False), tmp_path, 1)
    assert (tmp_path / "train.log").read_text() == "trained a bit\n"
    first = float((tmp_path / "train.log.cpu").read_text())
    (tmp_path / "checkpoint_last.pt").write_bytes(b"saved")
    cpu = run_step(fake_training(tmp_path, True), tmp_path, 1)
    assert (tmp_path / "train.log").read_text() == ("trained a bit\ntrained a bit\n"
                                                    "done training in 1.0 seconds\n")
    assert cpu > first > 0  # both parts' CPU time
    stamp = (tmp_path / "train.log").stat().st_mtime_ns
    assert run_step(fake_training(tmp_path, True), tmp_path, 1) == pytest.approx(cpu, abs=0.01)
    assert (tmp_path / "train.log").stat().st_mtime_ns == stamp  # finished: not run again
