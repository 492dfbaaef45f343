"""The demo: each part at tiny size on fixtures (gettext catalogs, manual pages; each run once,
``conftest.py``), the fallbacks, continuations, the summary table's speeds."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import shlex

import pytest

from scripts.common.fairseq_generate import sacre_bleu
from scripts.common.fairseq_train import train_command
from scripts.common.plotting import format_number
from scripts.common.run_record import Run
from scripts.demo import demo
from scripts.demo.reference_summaries import median_length, reference_outputs, unigram_entropy
from scripts.demo.report import SUMMARY_HEADERS, TABLE_HEADERS, summary_rows
from scripts.demo.summarization import reference_labels
from scripts.demo.summary_data import build_summary_data
from scripts.demo.try_it import EXAMPLE_SENTENCE
from scripts.recipes.lib.prepare_text import read_lines, sentencepiece_decode
from scripts.recipes.lib.score import rouge_scores

from helpers import run_command, table_by_label
from manpage_fixtures import write_fixture_man_pages

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def table_rows(text: str, headers=TABLE_HEADERS) -> dict:
    """The first result table in ``text`` with these headers, label -> {column: cell}."""
    return table_by_label(text, headers)


def try_it_commands(report: str) -> dict:
    """The report's try-it section: model label -> shell line."""
    section = report.split("## Try the models on your own text", 1)[1]
    return dict(re.findall(r"^(.+):\n\n```sh\n(.+)\n```$", section, flags=re.M))


def run_try_it(line: str):
    """A try-it line: its ``echo | python -c`` stages in bash, as written, then its last,
    ``fairseq-interactive``, on their output through ``run_command`` (in this process, as
    the README blocks' runs: 4 s of imports less)."""
    *stages, interactive = line.split(" | ")
    typed = run_command(["bash", "-o", "pipefail", "-c", " | ".join(stages)], timeout=300)
    command = shlex.split(interactive)
    assert os.access(command[0], os.X_OK), command[0]  # the console script the shell runs
    return run_command(command, input=typed.stdout)


@pytest.mark.slow
def test_tiny_translation_demo_on_fixture_catalog_prints_table_and_writes_report(
        tiny_translation):
    out, stdout = tiny_translation.out, tiny_translation.stdout  # --no-summaries
    assert "GNU gettext catalogs" in stdout
    table = table_rows(stdout)
    rows = {label: row for label, row in table.items() if not label.startswith("reference")}
    references = {label: row for label, row in table.items() if label.startswith("reference")}
    assert list(rows) == [
        "Transformer (softmax)", "ReLUFormer (regularised)",
        "Transformer + sparse-softmax, from scratch (top-5 decoding)",
        "softmax Transformer +10 updates label-smoothed CE",
        "softmax Transformer +10 updates sparse-softmax (top-5 decoding)"]
    for label, row in rows.items():
        for column in ("params", "updates", "train s", "words/s", "valid nll", "BLEU",
                       "tok BLEU", "attn entropy"):
            value = float(row[column])
            assert math.isfinite(value) and value >= 0, (label, column, row)
        assert int(row["updates"]) > 0 and float(row["words/s"]) > 0
        assert 0 <= float(row["BLEU"]) <= 100
    # the reference rows: the source copied and the frequent target words, same sacreBLEU
    work = out / "work"
    copy_row, trivial_row = references.values()
    assert copy_row["BLEU"] == format_number(sacre_bleu(
        read_lines(work / "raw" / "test.de"), read_lines(work / "raw" / "test.en")), 3)
    assert copy_row["valid nll"] == "-" and trivial_row["updates"] == "-"
    entropy = float(trivial_row["valid nll"])
    assert entropy == pytest.approx(unigram_entropy(
        read_lines(work / "prep" / "sentences" / "train.en"),
        read_lines(work / "prep" / "sentences" / "valid.en"),
        len(read_lines(work / "bin" / "sentences" / "dict.en.txt")) + 4), rel=5e-3)
    assert f"Unigram entropy of the target sentences: {entropy:.2f} bits/token" in stdout
    for pair in ("Transformer (softmax) against ReLUFormer (regularised): ",
                 "softmax Transformer +10 updates label-smoothed CE against softmax "
                 "Transformer +10 updates sparse-softmax (top-5 decoding): "):
        assert pair in stdout
    # the continuations ran their own budget from the softmax model's checkpoint
    for label in list(rows)[3:]:
        assert rows[label]["updates"] == "10"
    log = (out / "work" / "finetune_sparse" / "train.log").read_text()
    assert f"Loaded checkpoint {out / 'work' / 'softmax' / 'checkpoint_last.pt'}" in log
    assert "sparse_softmax_cross_entropy" in log
    assert "translation_sparse_decoding" in (
        out / "work" / "finetune_sparse" / "generate.log").read_text()
    # measured attention: ReLU rows hold exact zeros, softmax rows none
    assert float(rows["ReLUFormer (regularised)"]["attn zeros"]) > 0
    assert float(rows["Transformer (softmax)"]["attn zeros"]) == 0
    assert float(rows["Transformer (softmax)"]["attn entropy"]) > 0

    report = (out / "report.md").read_text()
    assert table_rows(report) == table
    assert "Long-input summarization" not in report
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert {"demo_loss.png", "analyze_attention_heatmap.png", "analyze_attention_entropy.png",
            "analyze_attention_zeros.png"} <= set(images)
    for name in images:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))
    # the report ends with a command per model; the example runs, lower-cased as the corpus
    commands = try_it_commands(report)
    assert list(commands) == list(rows)
    assert "lower-cased" in report
    command = commands["Transformer (softmax)"]
    assert command.startswith(f"echo {shlex.quote(EXAMPLE_SENTENCE)} | ")
    # a capitalised training sentence: every piece of it is in the dictionary once lower-cased
    sentence = next(line for line in read_lines(out / "work" / "raw" / "train.de")
                    if len(line.split()) > 1 and line != line.lower())
    command = command.replace(shlex.quote(EXAMPLE_SENTENCE), shlex.quote(sentence), 1)
    lines = run_try_it(command).stdout.splitlines()
    seen = [line.split("\t", 1)[1] for line in lines if line.startswith("S-0\t")]
    assert seen and "<unk>" not in seen[0] and seen[0] == seen[0].lower(), lines
    assert any(line.startswith("H-0\t") for line in lines)
    # typed as is, without the command's lower-casing step, its capitals are unknown
    interactive = shlex.split(command.split(" | ", 2)[2])
    assert "<unk>" in run_command(interactive, input=sentence + "\n").stdout
    sparse = commands["softmax Transformer +10 updates sparse-softmax (top-5 decoding)"]
    assert "--task translation_sparse_decoding" in sparse


@pytest.mark.slow
def test_tiny_summarization_demo_on_fixture_man_pages_reports_rouge_and_speed(tiny_summaries):
    out, stdout = tiny_summaries.out, tiny_summaries.stdout  # --no-translation
    assert f"manual pages ({tiny_summaries.fixtures / 'man'}/man*/)" in stdout
    report = (out / "report.md").read_text()
    assert "## Long-input summarization" in report and "## Translation" not in report
    rows = table_rows(report, SUMMARY_HEADERS)
    assert table_rows(stdout, SUMMARY_HEADERS) == rows
    prep = out / "work" / "prep" / "summaries"
    words = median_length(read_lines(prep / "train.reference"))
    labels = reference_labels(words)
    assert list(rows) == ["Vanilla encoder (64 tokens)", "Transpooler 64->16",
                          "Pyramidion 64->32->16", labels["trivial"], labels["lead"]]
    references = (out / "work" / "prep" / "summaries" / "test.reference").read_text()
    references = references.splitlines()
    assert references and all(references)
    # the reference rows: the same scorer on the trivial and lead outputs of the test pages
    documents = sentencepiece_decode(read_lines(prep / "test.doc"), prep / "spm.model")
    outputs = reference_outputs(read_lines(prep / "train.reference"), documents)
    for name in ("trivial", "lead"):
        expected = rouge_scores(outputs[name], references)
        row = rows[labels[name]]
        for column, key in (("ROUGE-1", "rouge1"), ("ROUGE-2", "rouge2"),
                            ("ROUGE-L", "rougeL")):
            assert row[column] == format_number(expected[key], 3)
        assert row["train speed"] == row["params"] == "-"
    entropy = float(rows[labels["trivial"]]["valid nll"])
    assert 0 < entropy < math.log2(200 + 4) + 1e-9  # at most log2 of the dictionary
    assert rows[labels["lead"]]["valid nll"] == "-"
    assert f"Unigram entropy of the summaries: {entropy:.2f} bits/token" in report
    assert "Unigram entropy of the summaries" in stdout
    trivial = float(rows[labels["trivial"]]["ROUGE-1"])
    if all(float(rows[label]["ROUGE-1"]) <= trivial for label in list(rows)[:3]):
        assert "not meaningful at this budget" in report
    else:
        assert "not meaningful at this budget" not in report
        # the Pyramidion against the vanilla encoder: "both learned" (never ranked) or not
        vanilla, pyramidion = "Vanilla encoder (64 tokens)", "Pyramidion 64->32->16"
        sentence = next(line for line in report.splitlines()
                        if line.startswith(f"- {pyramidion} against {vanilla}: "))
        learned = all(entropy - float(rows[label]["valid nll"]) >= 2
                      and float(rows[label]["ROUGE-1"]) > trivial
                      for label in (vanilla, pyramidion))
        assert ("both learned" in sentence) == learned
        assert ("**not meaningful**" in sentence) == (not learned)
        assert "ahead" not in sentence
    # a try-it command per model; the Pyramidion's summarises the example page
    commands = try_it_commands(report)
    assert list(commands) == list(rows)[:3]
    lines = run_try_it(commands["Pyramidion 64->32->16"]).stdout.splitlines()
    assert any(line.startswith("H-0\t") for line in lines), lines
    source = [line for line in lines if line.startswith("S-0\t")]
    seen = source[0].split("\t", 1)[1] if source else ""
    assert seen and seen == seen.lower()
    for key, label in zip(("sum_vanilla", "sum_transpooler", "sum_pyramidion"), rows):
        row = rows[label]
        # the report's ROUGE is the recipes' scorer on the decoded summaries
        hypotheses = (out / "work" / key / "test.hyp").read_text().splitlines()
        assert len(hypotheses) == len(references) and any(hypotheses)
        expected = rouge_scores(hypotheses, references)
        for column, name in (("ROUGE-1", "rouge1"), ("ROUGE-2", "rouge2"),
                             ("ROUGE-L", "rougeL")):
            assert row[column] == format_number(expected[name], 3)  # the table's rounding
            assert 0 <= float(row[column]) <= 100
        assert float(row["ROUGE-1"]) >= float(row["ROUGE-2"])
        for column in ("train CPU s", "train speed", "valid nll"):
            value = float(row[column])
            assert math.isfinite(value) and value > 0, (label, column, row)
        # fairseq prints decoding times to 0.1 s: a tiny decode may take "0.0" (ratio "-")
        assert float(row["decode s"]) >= 0
        assert row["decode speed"] == "-" or float(row["decode speed"]) > 0
        assert int(row["updates"]) == 10
        # every model saw inputs of exactly 64 tokens: 63 pieces and the end of sentence
        log = (out / "work" / key / "train.log").read_text()
        assert "--max-source-positions" not in log or "64" in log
    assert float(rows["Vanilla encoder (64 tokens)"]["train speed"]) == 1
    sources = (out / "work" / "prep" / "summaries" / "test.doc").read_text().splitlines()
    assert {len(line.split()) for line in sources} == {63}
    # the pooling models have the token scorers on top of the same encoder
    params = [int(row["params"]) for row in list(rows.values())[:3]]
    assert params[0] < params[1] < params[2]


def test_without_man_pages_it_says_so_and_builds_the_generated_task(tmp_path):
    said = []
    summary = demo.SCALES["tiny"].summary
    prep = tmp_path / "prep"
    prep.mkdir()
    origin = build_summary_data(tmp_path / "none", summary, tmp_path / "raw", prep,
                                said.append)
    text = "\n".join(said)
    assert "No manual pages" in text and str(tmp_path / "none") in text
    assert "GENERATED summarization task" in text
    assert origin.startswith("generated task")
    for split in ("train", "valid", "test"):
        docs = (prep / f"{split}.doc").read_text().splitlines()
        sums = (prep / f"{split}.sum").read_text().splitlines()
        refs = (prep / f"{split}.reference").read_text().splitlines()
        assert docs and len(docs) == len(sums) == len(refs)
        assert {len(d.split()) for d in docs} == {summary.source_tokens - 1}
    # the rule: the summary lists the topic words, each of which occurs in the document
    raw_docs = (tmp_path / "raw" / "train.doc").read_text().splitlines()
    raw_sums = (tmp_path / "raw" / "train.sum").read_text().splitlines()
    for doc, summary_text in zip(raw_docs, raw_sums):
        assert all(word in doc.split() for word in summary_text.split())


def test_too_few_long_pages_fall_back_too(tmp_path):
    said = []
    man = write_fixture_man_pages(tmp_path / "man")  # pages of ~150 words
    prep = tmp_path / "prep"
    prep.mkdir()
    longer = dataclasses.replace(demo.SCALES["tiny"].summary, source_tokens=512)
    origin = build_summary_data(man, longer, tmp_path / "raw", prep, said.append)
    assert origin.startswith("generated task")
    assert any("have at least 512 tokens" in line for line in said)
    assert {len(line.split()) for line in (prep / "test.doc").read_text().splitlines()} == {
        511}


def test_a_continuation_starts_from_its_parent_with_a_constant_learning_rate(tmp_path):
    scale = demo.SCALES["default"]
    args = argparse.Namespace(seed=1, budget_scale=1.0)
    parent = Run("softmax", "Transformer", "relu_former_iwslt_de_en", [], updates=800,
                      train_seconds=360.0)
    child = Run("finetune_sparse", "continued", "relu_former_iwslt_de_en",
                     ["--criterion", "sparse_softmax_cross_entropy"], parent=parent)
    command, max_update, budget = train_command(child, scale.budget(child), tmp_path / "bin",
                                                tmp_path, args)
    command = [str(c) for c in command]
    assert max_update == scale.finetune_update == 300
    assert command[command.index("--finetune-from-model") + 1] == str(
        tmp_path / "softmax" / "checkpoint_last.pt")
    assert command[command.index("--lr-scheduler") + 1] == "fixed"
    # the learning rate the parent's inverse-sqrt schedule ended at: lr * sqrt(warmup / 800)
    assert float(command[command.index("--lr") + 1]) == pytest.approx(
        2e-3 * (300 / 800) ** 0.5, rel=1e-5)
    assert "--warmup-init-lr" not in command
    # fairseq counts the parent's training time stored in its checkpoint against the cap
    cap = scale.safety_cap_s * 300 / 800
    assert budget == pytest.approx(cap)
    assert float(command[command.index("--stop-time-hours") + 1]) == pytest.approx(
        (360 + cap) / 3600, abs=1e-6)
    # a parent stopped during warm-up ended on the warm-up line
    parent.updates = 150
    command, _, _ = train_command(child, scale.budget(child), tmp_path / "bin", tmp_path, args)
    assert float(command[command.index("--lr") + 1]) == pytest.approx(2e-3 * 150 / 300)
    assert command[command.index("--max-update") + 1] == "300"
    scratch, _, _ = train_command(parent, scale.budget(parent), tmp_path / "bin", tmp_path, args)
    assert "--finetune-from-model" not in scratch and "inverse_sqrt" in scratch


def test_summary_speeds_are_relative_to_the_vanilla_row():
    runs = [Run("sum_vanilla", "vanilla", "pyramidion_base", [], data="summaries",
                     updates=10, train_cpu=40.0, decode_seconds=6.0),
            Run("sum_pyramidion", "pyramidion", "pyramidion_base", [], data="summaries",
                     updates=5, train_cpu=10.0, decode_seconds=2.0,
                     rouge={"rouge1": 30.0, "rouge2": 10.0, "rougeL": 25.0})]
    rows = summary_rows(runs)
    header = SUMMARY_HEADERS
    vanilla, pyramidion = (dict(zip(header, row)) for row in rows)
    assert vanilla["train speed"] == 1 and vanilla["decode speed"] == 1
    assert vanilla["ROUGE-1"] == "-"
    assert pyramidion["train speed"] == 2.0  # 4 CPU s per update against 2
    assert pyramidion["decode speed"] == 3.0
    assert (pyramidion["ROUGE-1"], pyramidion["ROUGE-2"], pyramidion["ROUGE-L"]) == (30, 10, 25)
    runs[1].decode_seconds = 0.0  # below fairseq's 0.1 s resolution: no ratio
    assert dict(zip(header, summary_rows(runs)[1]))["decode speed"] == "-"


def test_bad_flags_are_argparse_errors(capsys):
    for flags in (["--jobs", "0"], ["--threads", "0"], ["--tiny", "--full"],
                  ["--no-summaries", "--no-translation"]):
        with pytest.raises(SystemExit):
            demo.parse_args(flags)
    assert "--jobs" in capsys.readouterr().err
    # update budgets only: no wall-clock cap to scale
    with pytest.raises(SystemExit):
        demo.parse_args(["--budget-scale", "2"])
    assert "unrecognized arguments: --budget-scale" in capsys.readouterr().err


def test_threads_default_to_one_per_job_whatever_the_cores():
    assert (demo.parse_args([]).threads, demo.parse_args([]).jobs) in ((2, 2), (1, 1))
    args = demo.parse_args(["--jobs", "3"])
    assert args.threads == 3
    assert demo.parse_args(["--threads", "4", "--jobs", "2"]).threads == 4


def test_safety_caps_are_far_above_what_the_budgets_take():
    # 0.22 CPU s an update of the default translation model, 0.3 of the summaries' (measured);
    # the caps are a net, at least 3x that on 2 quiet cores
    scale = demo.SCALES["default"]
    assert scale.safety_cap_s >= 3 * scale.max_update * 0.22
    assert scale.summary.safety_cap_s >= 3 * scale.summary.max_update * 0.3
    child = Run("finetune_ce", "c", "a", [], parent=Run("softmax", "s", "a", []))
    assert scale.budget(child).time_budget_s >= 3 * scale.finetune_update * 0.22
