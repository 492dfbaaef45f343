"""The command line: every table is listed; ``--scale paper --dry-run`` prints the exact
fairseq commands (through the recipes' own ``--dry-run``) for every table; logs copied back
from a cluster build the table with ``--collect-only``; bad flags name the fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scripts.reproduce.__main__ import main
from scripts.reproduce.cell_plan import selected_rows
from scripts.reproduce.tables import TABLES

EXPECTED = {"relu_former_table4", "relu_former_table5", "relu_former_table6",
            "relu_former_memory", "sparse_softmax_classification", "sparse_softmax_generation",
            "pyramidion_table4", "pyramidion_table7", "halving_operator"}


def test_every_table_is_listed(capsys):
    assert set(TABLES) == EXPECTED
    assert main(["--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert listed == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_paper_dry_run_prints_the_commands(name, tmp_path, capsys):
    assert main([name, "--scale", "paper", "--dry-run", "--seeds", "2",
                 "--work", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    spec = TABLES[name]
    # every row the paper scale runs: the shown ones and the hidden ones they start from
    shown = selected_rows(spec, None, spec.settings("paper"))
    assert {row.key for row in spec.rows if not row.hidden} <= {row.key for row in shown}
    for row in shown:
        for seed in (1, 2):
            assert re.search(rf"^# {row.key}, seed {seed} -> ", out, re.M), row.key
    if spec.kind in ("translation", "summarization"):
        # the recipe's own dry run: the exact fairseq-train command, with the seed
        trains = [line for line in out.splitlines() if "fairseq-train " in line]
        assert len(trains) == 2 * len(shown)
        assert all("--seed " in line for line in trains)
        assert "fairseq-generate " in out
    elif spec.kind == "classification":
        assert out.count("fairseq_cli.train") == 2 * len(shown)
    assert not list(tmp_path.rglob("result.json"))  # nothing ran


def test_table6_paper_scale_trains_every_length_from_scratch(tmp_path, capsys):
    main(["relu_former_table6", "--scale", "paper", "--dry-run", "--seeds", "1",
          "--work", str(tmp_path)])
    out = capsys.readouterr().out
    for length in (128, 256, 512, 1024, 2048):
        assert f"SEGMENT_LENGTH={length} " in out
        assert f"data-bin/seg{length} " in out
    assert "--finetune-from-model" not in out


def fake_recipe_logs(folder, valid_nll: float, bleu: float) -> None:
    """What a cluster run of the recipes leaves in SAVE_DIR (fairseq json log + score)."""
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        "2026-01-01 00:00:00 | INFO | fairseq_cli.train | num. shared model params: 1,234 "
        "(num. trained: 1,234)",
        '2026-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "update": 0.1, "loss": "9.1",'
        ' "nll_loss": "8.5", "num_updates": "100"}',
        '2026-01-01 00:00:02 | INFO | valid | {"epoch": 1, "valid_loss": "5.0", '
        f'"valid_nll_loss": "{valid_nll}", "valid_num_updates": "100"}}',
        "2026-01-01 00:00:03 | INFO | fairseq_cli.train | done training in 12.5 seconds",
    ]
    (folder / "train.log").write_text("\n".join(records) + "\n")
    (folder / "score-test-beam5.json").write_text(json.dumps(
        {"sentences": 10, "bleu4_tokenized": bleu, "sacrebleu_signature": "x"}))


def test_collect_only_builds_the_table_from_cluster_logs(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    args = ["relu_former_table4", "--scale", "paper", "--seeds", "3", "--work", str(work)]
    main([*args, "--dry-run"])
    folders = re.findall(r"^# (\w+), seed (\d) -> (\S+)$", capsys.readouterr().out, re.M)
    assert len(folders) == 15
    for row, seed, folder in folders:
        if row in ("relu_former", "transformer"):
            bleu = (34.5 if row == "relu_former" else 33.0) + 0.1 * int(seed)
            fake_recipe_logs(Path(folder), 4.0, bleu)
    assert main([*args, "--collect-only", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| ReLUFormer | 34.70 ± 0.10 | 34.56 |" in text
    assert "| Transformer (softmax) | 33.20 ± 0.10 | 34.22 |" in text
    # a parity claim within 1 BLEU, paired by seed (each seed 1.5 ahead: no spread, so the
    # exact sign-flip test, no t); the logs record no plateau, so no verdict
    assert re.search(r"\| ReLUFormer >= Transformer in BLEU \| BLEU \| parity within 1, exact "
                     r"sign-flip test \| \+1\.50 \| - \| 2\.00 \| 0\.25 \| - \| not resolved: "
                     r"still learning: ReLUFormer, 3 of 3 seeds stopped", text)
    assert "| Sparsemax | - |" in text  # no logs: no figure, never an invented one
    assert "6 of 15 cells finished" in text
    # the report names the command that trains the table, not this call's --collect-only
    assert (f"Command: `python -m scripts.reproduce relu_former_table4 --scale paper --seeds 3 "
            f"--work {work} --out {out}`") in text


def test_the_reported_command_leaves_out_how_one_call_ran():
    from scripts.reproduce.__main__ import reproducing_argv

    argv = ["relu_former_table4", "--rows", "transformer", "--budget-minutes", "30",
            "--no-report", "--max-new-cells=2", "--collect-only", "--seeds", "3"]
    assert reproducing_argv(argv) == ["relu_former_table4", "--rows", "transformer",
                                      "--seeds", "3"]


def test_bad_flags_name_the_fix(capsys):
    with pytest.raises(SystemExit):
        main(["relu_former_table6", "--set", "nonsense=1"])
    assert ("--set 'nonsense=1': expected [TABLE:]KEY=VALUE with KEY one of"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit):  # a setting of another table names that table
        main(["relu_former_table6", "--set", "nowhere:lang=de"])
    assert "--set 'nowhere:lang=de': no table 'nowhere'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["relu_former_table6", "--rows", "nope"])
    assert "relu_former_table6 has no row 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a starting point that no row of the scale starts from
        main(["sparse_softmax_generation", "--rows", "pretrained"])
    assert "'pretrained' is only a starting point, of no row at scale toy" in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main([])
    assert "TABLE is required" in capsys.readouterr().err


def test_halving_operator_tiny_runs_caches_and_reports(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    args = ["halving_operator", "--scale", "tiny", "--seeds", "2", "--work", str(work),
            "--out", str(out)]
    assert main(args) == 0
    results = sorted(work.rglob("result.json"))
    assert len(results) == 8
    stamps = [p.stat().st_mtime_ns for p in results]
    figures = json.loads(results[0].read_text())["figures"]
    assert figures["ms"] > 0 and 0 < figures["nccs"] <= 1.0 + 1e-6
    assert main(args) == 0  # cached: not measured again
    assert [p.stat().st_mtime_ns for p in results] == stamps
    text = out.read_text()
    assert "## Pyramidion, operator figures" in text and "8 of 8 cells finished" in text


def test_collect_only_skips_a_run_that_did_not_finish(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "reproduction.md"
    args = ["relu_former_table4", "--scale", "paper", "--seeds", "2", "--work", str(work),
            "--rows", "relu_former"]
    main([*args, "--dry-run"])
    folders = re.findall(r"^# \w+, seed \d -> (\S+)$", capsys.readouterr().out, re.M)
    fake_recipe_logs(Path(folders[0]), 4.0, 30.0)
    killed = Path(folders[1])
    fake_recipe_logs(killed, 4.0, 31.0)
    log = (killed / "train.log").read_text().splitlines()
    (killed / "train.log").write_text("\n".join(log[:-1]) + "\n")  # no 'done training'
    assert main([*args, "--collect-only", "--out", str(out)]) == 0
    assert "did not finish" in capsys.readouterr().err
    assert not (killed / "result.json").exists()
    assert "| ReLUFormer | 30.00 | 34.56 |" in out.read_text()
