"""The synthetic memory study: the plugin's FFN variants memorise keys far above chance, a
ReLU FFN with a slot per key memorises every key, and the table's claims go through the
protocol (rate grid, plateau or cap, refusals, Welch with Holm); a rerun resumes."""

from __future__ import annotations

import json

import pytest
import torch

from scripts.reproduce.synthetic_memory import NAME, main, make_task, train

LIMITS = {"max_steps": 400, "patience": 60, "min_gain": 0.0, "loss_gain": 0.01, "every": 20}
TINY = ["--keys", "32", "--width", "16", "--slots", "8", "32", "--patience", "60",
        "--every", "20"]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_relu_ffn_with_a_slot_per_key_memorises_every_key():
    task = make_task(keys=32, width=16)
    found = train(task, "stock", slots=32, lr=1e-2, seed=1, limits=LIMITS)
    assert found["figures"]["accuracy"] == 100.0
    assert found["stopped"] == "plateau" and not found["still_improving"]
    # the curve starts near chance and ends where the figure says
    assert found["curve"][0][2] < 25.0 and found["curve"][-1][2] == 100.0


def test_trivial_accuracy_is_the_most_frequent_class_share():
    task = make_task(keys=64, width=8)
    counts = torch.bincount(task.targets)
    assert task.trivial_accuracy() == counts.max().item() / 64
    assert task.trivial_accuracy() >= 1 / 64


def test_softmax_memory_is_not_the_stock_ffn():
    # the variant reaches the plugin's modules: the same seed and rate learn differently
    task = make_task(keys=32, width=16)
    curves = {variant: train(task, variant, 8, 1e-2, 1, {**LIMITS, "max_steps": 40})["curve"]
              for variant in ("stock", "softmax", "softmax_ln")}
    assert len({json.dumps(curve) for curve in curves.values()}) == 3


def test_table_judges_the_claims_and_resumes(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--max-steps", "400", *TINY]) == 0
    stored = json.loads((tmp_path / f"{NAME}.json").read_text())
    assert stored["task"]["chance_accuracy"] == pytest.approx(100 / 32)
    for row in stored["rows"].values():
        rates = [lr for lr, _ in row["lr_grid"]]
        assert len(rates) >= 4 and row["lr"] in rates
        assert [seed["seed"] for seed in row["seeds"]] == [1, 2, 3]
        assert all(seed["stopped"] in ("plateau", "cap") and seed["curve"]
                   for seed in row["seeds"])
    relu = stored["rows"]["stock_32"]["seeds"]
    assert min(seed["figures"]["accuracy"] for seed in relu) > 10 * 100 / 32
    claims = stored["claims"]
    assert len(claims) == 4 and [c["margin"] for c in claims] == [None, 1.0, None, 1.0]
    for claim in claims:
        capped = any(seed["stopped"] == "cap" for key in claim["rows"]
                     for seed in stored["rows"][key]["seeds"])
        if capped:
            assert claim["verdict"].startswith("not resolved: still learning")
        else:  # tested: Welch's p, Holm's p and a verdict of the rule
            assert claim["p_holm"] is None or claim["p_holm"] >= claim["p"]
            assert claim["verdict"].split(":")[0] in ("holds", "reversed", "not resolved")
    assert (tmp_path / f"{NAME}.md").read_text().count("slots |") == 4
    capsys.readouterr()
    assert main(["--out", str(tmp_path), "--max-steps", "400", *TINY]) == 0
    assert "(0 trained now)" in capsys.readouterr().out
    assert json.loads((tmp_path / f"{NAME}.json").read_text())["claims"] == claims


def test_models_stopped_at_the_cap_get_no_verdict(tmp_path):
    # 3 steps: every row is capped, and some still at the most frequent class's share
    main(["--out", str(tmp_path), "--max-steps", "3", *TINY])
    stored = json.loads((tmp_path / f"{NAME}.json").read_text())
    verdicts = [claim["verdict"] for claim in stored["claims"]]
    assert len(verdicts) == 4 and all(claim["p_holm"] is None for claim in stored["claims"])
    assert all(v.startswith(("not resolved: still learning", "not meaningful"))
               for v in verdicts)
    assert any(v.startswith("not resolved: still learning") for v in verdicts)


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--out", "--seeds", "--slots", "--keys", "--lr-grid", "--max-steps",
                 "--patience", "--min-gain", "--loss-gain"):
        assert flag in text
