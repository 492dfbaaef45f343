"""The demo: the whole pipeline at tiny size on a fixture catalog, the fallback, log parsing."""

from __future__ import annotations

import math
import re
import sys

import pytest

from scripts.demo import demo

from catalog_fixtures import write_fixture_catalogs
from helpers import run_command

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def table_rows(text: str) -> dict:
    """The demo's result table, model label -> {column: cell}, from printed Markdown."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == demo.TABLE_HEADERS
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


@pytest.mark.slow
def test_tiny_demo_on_fixture_catalog_prints_table_and_writes_report(tmp_path):
    locale = write_fixture_catalogs(tmp_path / "locale")
    out = tmp_path / "report"
    proc = run_command([sys.executable, "-m", "scripts.demo.demo", "--tiny", "--quiet",
                        "--locale-dir",
                        locale, "--out", out], timeout=900)
    assert "GNU gettext catalogs" in proc.stdout
    rows = table_rows(proc.stdout[proc.stdout.index("| model"):])
    labels = list(rows)
    assert labels[:3] == ["Transformer (softmax)", "ReLUFormer (regularised)",
                          "Transformer + sparse-softmax"]
    assert rows.keys() >= {"Vanilla encoder (documents)", "Transpooler 48->12 (documents)"}
    for label, row in rows.items():
        for column in ("params", "updates", "train s", "words/s", "valid nll", "BLEU",
                       "tok BLEU"):
            value = float(row[column])
            assert math.isfinite(value) and value >= 0, (label, column, row)
        assert int(row["updates"]) > 0 and float(row["words/s"]) > 0
        assert 0 <= float(row["BLEU"]) <= 100
    # measured attention: ReLU rows hold exact zeros, softmax rows none
    assert float(rows["ReLUFormer (regularised)"]["attn zeros"]) > 0
    assert float(rows["Transformer (softmax)"]["attn zeros"]) == 0
    assert float(rows["Transformer (softmax)"]["attn entropy"]) > 0
    # the pooled model really pools: it has the token scorer's parameters on top
    assert int(rows["Transpooler 48->12 (documents)"]["params"]) > int(
        rows["Vanilla encoder (documents)"]["params"])

    report = (out / "report.md").read_text()
    assert table_rows(report[report.index("| model"):]) == rows
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert {"demo_loss.png", "analyze_attention_heatmap.png", "analyze_attention_entropy.png",
            "analyze_attention_zeros.png"} <= set(images)
    for name in images:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))


def test_without_catalogs_it_says_so_and_prepares_the_generated_task(tmp_path, capsys):
    args = demo.parse_args(["--tiny", "--locale-dir", str(tmp_path / "empty")])
    scale = demo.SCALES["tiny"]
    raw, prep = tmp_path / "raw", tmp_path / "prep"
    origin = demo.make_corpus(args, scale, raw)
    said = capsys.readouterr().out
    assert "No usable gettext catalogs" in said and str(tmp_path / "empty") in said
    assert "GENERATED task" in said
    assert origin.startswith("generated task")
    sources = (raw / "train.de").read_text().splitlines()
    targets = (raw / "train.en").read_text().splitlines()
    assert len(sources) == scale.generated_train
    # the rule: a fixed lexicon, and the last word moved to second place
    lexicon = {}
    for source, target in zip(sources, targets):
        words, out = source.split(), target.split()
        reordered = [out[0]] + out[2:] + [out[1]]
        for s, t in zip(words, reordered):
            assert lexicon.setdefault(s, t) == t
    demo.prepare(raw, prep, scale.bpe_merges, scale.doc_max_tokens)
    for data in ("sentences", "documents"):
        for split in ("train", "valid", "test"):
            assert (prep / data / f"{split}.de").read_text().strip()
    documents = (prep / "documents" / "train.de").read_text().splitlines()
    assert max(len(line.split()) for line in documents) <= scale.doc_max_tokens
    assert len(documents) < len(sources)


def test_fairseq_log_lines_fold_into_a_run():
    run = demo.Run("relu", "ReLUFormer", "relu_former_iwslt_de_en", [])
    lines = [
        "2026-11-29 08:00:41 | INFO | fairseq_cli.train | num. shared model params: 1,234,567 "
        "(num. trained: 1,234,567)",
        '2026-11-29 08:01:09 | INFO | train_inner | {"epoch": 1, "loss": "12.2", '
        '"nll_loss": "11.9", "attn_zero_share": "0.49", "wps": "1375", "num_updates": "20"}',
        '2026-11-29 08:01:31 | INFO | train_inner | {"epoch": 1, "loss": "11.3", '
        '"nll_loss": "10.8", "wps": "1448.4", "num_updates": "40"}',
        '2026-11-29 08:01:51 | INFO | valid | {"epoch": 1, "valid_loss": "10.5", '
        '"valid_nll_loss": "10.1", "valid_num_updates": "40"}',
        "2026-11-29 08:01:51 | INFO | fairseq_cli.train | done training in 65.2 seconds",
    ]
    tags = [demo.parse_log_line(line, run) for line in lines]
    assert tags == [None, "train_inner", "train_inner", "valid", None]
    assert run.params == 1234567
    assert run.losses == [(20, 11.9), (40, 10.8)]
    assert run.wps == [1375.0, 1448.4] and run.updates == 40
    assert run.valid_nll == 10.1 and run.train_seconds == 65.2


def test_resume_reuses_only_finished_trainings(tmp_path):
    run = demo.Run("softmax", "Transformer", "relu_former_iwslt_de_en", [])
    folder = tmp_path / "softmax"
    folder.mkdir()
    (folder / "checkpoint_last.pt").write_bytes(b"")
    log = ('2026-11-29 08:01:09 | INFO | train_inner | {"nll_loss": "9.5", "wps": "900", '
           '"num_updates": "10"}\n')
    (folder / "train.log").write_text(log)
    assert not demo.trained_before(run, tmp_path)  # no "done training": interrupted
    assert run.losses == []
    (folder / "train.log").write_text(log + "x | fairseq_cli.train | done training in 3.5 "
                                      "seconds\n")
    assert demo.trained_before(run, tmp_path)
    assert run.losses == [(10, 9.5)] and run.train_seconds == 3.5 and run.updates == 10


def test_bad_flags_are_argparse_errors(capsys):
    for flags in (["--jobs", "0"], ["--budget-scale", "0"], ["--tiny", "--full"]):
        with pytest.raises(SystemExit):
            demo.parse_args(flags)
    assert "--jobs" in capsys.readouterr().err
