"""The synthetic scorer study: through the plugin's TokenPooler a linear scorer learns to keep
the marked tokens, random and index selection stay at the k/n share, the dominant source of a
slot is the input of largest weight, and the table's claims go through the protocol (rate
grid, plateau or cap, refusals, Welch with Holm); a rerun resumes."""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch

from scripts.reproduce.synthetic_scorer import NAME, dominant, main, make_task, train

from helpers import run_command

LIMITS = {"max_steps": 600, "patience": 100, "batch": 32, "min_gain": 0.5, "loss_gain": 0.01,
          "every": 25}
TINY = ["--length", "32", "--train", "128", "--test", "64", "--patience", "60",
        "--every", "20", "--max-steps", "400", "--lr-grid", "0.005", "0.01"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def task():
    return make_task(length=64, train=256, test=128)


def test_task_marks_a_quarter_and_counts_their_contents(task):
    split = task.train
    assert task.kept == 16 and (split.marked.sum(1) == 16).all()
    # marked ids are the upper half of the vocabulary, carrying the same contents
    assert ((split.ids >= task.contents) == split.marked).all()
    content = split.ids % task.contents
    for row in range(5):
        expected = torch.bincount(content[row][split.marked[row]], minlength=task.contents)
        assert torch.equal(split.counts[row], expected.float())
    assert torch.allclose(task.table[task.contents:] - task.table[:task.contents],
                          (task.table[task.contents] - task.table[0]).expand(task.contents, -1))
    assert task.chance_recall() == 25.0


def test_dominant_is_the_slot_input_of_largest_weight():
    generator = torch.Generator().manual_seed(3)
    slot = torch.randint(4, (6, 20), generator=generator)
    weight = torch.rand(6, 20, generator=generator, dtype=torch.float64)
    weight[0, :2], slot[0, :2] = 0.9, 0  # a tie goes to the earlier position
    found = dominant(slot, weight, 4)
    for b in range(6):
        for j in range(4):
            members = [(weight[b, i].item(), -i) for i in range(20) if slot[b, i] == j]
            if members:
                assert found[b, j].item() == -max(members)[1]
    assert found[0, 0].item() == 0


def test_linear_scorer_learns_to_keep_the_marked_tokens(task):
    found = train(task, "linear", 1e-2, seed=1, limits=LIMITS)
    assert found["figures"]["recall"] > 90.0
    assert found["figures"]["test_loss"] < task.no_model_loss(task.test) / 4
    assert found["stopped"] == "plateau" and not found["still_improving"]
    # the scorer starts wherever its initial weights put it and rises from there
    assert found["curve"][0][2] < found["curve"][-1][2]


def test_random_and_index_scorers_stay_at_the_marked_share(task):
    for scorer in ("random", "index"):
        found = train(task, scorer, 1e-2, seed=1, limits=LIMITS)
        assert 15.0 < found["figures"]["recall"] < 35.0, scorer
    # the index scorer keeps the first k tokens, whose marks are random
    found = train(task, "index", 1e-2, seed=2, limits={**LIMITS, "max_steps": 25})
    first = 100.0 * task.test.marked[:, :task.kept].double().mean().item()
    assert found["figures"]["recall"] == pytest.approx(first, abs=1e-9)


def test_table_judges_the_claims_and_resumes(tmp_path, capsys):
    assert main(["--out", str(tmp_path), *TINY]) == 0
    stored = json.loads((tmp_path / f"{NAME}.json").read_text())
    assert stored["task"]["chance_recall"] == 25.0 and stored["task"]["kept"] == 8
    assert list(stored["rows"]) == ["linear", "nonlinear", "index", "power", "random"]
    for key, row in stored["rows"].items():
        # the rate is the grid's lowest final loss, the grid at least the one given
        grid = dict(row["lr_grid"])
        assert {0.005, 0.01} <= set(grid) and grid[row["lr"]] == min(grid.values()), key
        seeds = row["seeds"]
        assert [seed["seed"] for seed in seeds] == [1, 2, 3], key
        assert {seed["stopped"] for seed in seeds} <= {"plateau", "cap"}, key
        # each seed's curve ends at the step it stopped at
        assert all(seed["curve"][-1][0] == seed["updates"] for seed in seeds), key
    linear = stored["rows"]["linear"]["seeds"]
    assert min(seed["figures"]["recall"] for seed in linear) > 75.0
    claims = stored["claims"]
    assert [claim["rows"] for claim in claims] == [["linear", "random"], ["linear", "index"],
                                                   ["linear", "power"]]
    for claim in claims:
        assert set(claim) >= {"claim", "rows", "metric", "verdict", "t", "df", "p", "margin"}
        assert claim["metric"] == "recall" and claim["margin"] is None
        capped = any(seed["stopped"] == "cap" for key in claim["rows"]
                     for seed in stored["rows"][key]["seeds"])
        if capped:
            assert claim["verdict"].startswith(("not resolved: still learning",
                                                "not meaningful"))
        elif claim["p_holm"] is not None:
            assert claim["p_holm"] >= claim["p"]
            assert claim["verdict"].split(":")[0] in ("holds", "reversed", "not resolved")
    assert (tmp_path / f"{NAME}.md").read_text().count("scorer |") == 10
    capsys.readouterr()
    assert main(["--out", str(tmp_path), *TINY]) == 0
    assert "(0 trained now)" in capsys.readouterr().out
    assert json.loads((tmp_path / f"{NAME}.json").read_text())["claims"] == claims


def test_untrained_models_get_no_verdict(tmp_path):
    # 2 steps: every row is capped, the trainable scorers near their initial recall
    main(["--out", str(tmp_path), *TINY[:-5], "--max-steps", "2", "--every", "1",
          "--seeds", "3", "--lr-grid", "0.01"])
    stored = json.loads((tmp_path / f"{NAME}.json").read_text())
    assert all(claim["p_holm"] is None for claim in stored["claims"])
    assert all(claim["verdict"].startswith(("not resolved: still learning", "not meaningful"))
               for claim in stored["claims"])


def test_command_line_explains_every_option():
    shown = run_command([sys.executable, "-m", f"scripts.reproduce.{NAME}", "--help"]).stdout
    # argparse prints an option's help on its line or the next; every option has some
    lines = shown.splitlines()
    options = {}
    for number, line in enumerate(lines):
        if match := re.match(r"\s+(--[a-z-]+)", line):
            rest = line[match.end():].split("  ", 1)[1:] or lines[number + 1:number + 2]
            options[match.group(1)] = " ".join(rest).strip()
    assert set(options) == {"--out", "--seeds", "--lr-grid", "--max-steps",
                            "--patience", "--loss-gain", "--every", "--length", "--contents",
                            "--width", "--train", "--test", "--batch", "--min-gain"}
    assert all(options.values()), options
