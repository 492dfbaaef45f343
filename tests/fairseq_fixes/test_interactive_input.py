"""``fairseq-interactive`` skips (or, under ``--truncate-source``, truncates) an input line
longer than the model accepts, says so, and goes on with the next lines."""

from __future__ import annotations

import re

import pytest
import torch

from relu_former.fairseq_fixes.interactive_input import (
    source_limit,
    strip_byte_order_mark,
    truncate_source,
)

from helpers import USER_DIR, fairseq_command, run_command

LIMIT = 16  # --max-source-positions of the trained model
LINES = ["w1 w2 w3", " ".join(f"w{i % 30}" for i in range(40)), "w4 w5", "w6 w7 w8 w9"]


def test_source_limit_and_truncation():
    assert source_limit((16, 1024)) == 16 and source_limit(20) == 20
    assert source_limit(None) is None
    tokens = torch.arange(4, 40)
    assert truncate_source(tokens, 8, eos=2).tolist() == [4, 5, 6, 7, 8, 9, 10, 2]


@pytest.fixture(scope="module")
def short_model(toy_data_bin, tmp_path_factory):
    from helpers import FairseqRun

    run = FairseqRun(data_bin=toy_data_bin, work=tmp_path_factory.mktemp("interactive"))
    run.train("--max-source-positions", str(LIMIT), "--max-update", "2")
    return run.work / "checkpoints" / "checkpoint_last.pt"


def _interactive(model, data_bin, *extra, lines=LINES):
    return run_command([fairseq_command("fairseq-interactive"), data_bin, "--user-dir",
                        USER_DIR, "--path", model, "--source-lang", "de", "--target-lang", "en",
                        "--cpu", "--beam", "2", "--buffer-size", "2", "--max-tokens", "1000",
                        *extra], input="\n".join(lines) + "\n", check=False)


def test_byte_order_mark_is_stripped():
    assert strip_byte_order_mark("\ufeffw1 w2\n") == "w1 w2\n"
    assert strip_byte_order_mark("w1 \ufeffw2") == "w1 \ufeffw2"  # only at the start


@pytest.mark.slow
def test_byte_order_mark_does_not_make_the_first_word_unknown(short_model, toy_data_bin):
    """A file saved with a UTF-8 BOM: its first word is read as the word, not as <unk>, and
    the line translates as the same line without the mark."""
    proc = _interactive(short_model, toy_data_bin, lines=["\ufeffw1 w2 w3", "w1 w2 w3"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    sources = dict(re.findall(r"^S-(\d+)\t(.*)$", proc.stdout, re.M))
    assert sources == {"0": "w1 w2 w3", "1": "w1 w2 w3"}, sources
    hypotheses = _hypotheses(proc.stdout)
    assert hypotheses[0] == hypotheses[1]


def _hypotheses(stdout: str) -> dict:
    return {int(i): text for i, text in re.findall(r"^H-(\d+)\t\S+\t(.*)$", stdout, re.M)}


@pytest.mark.slow
def test_over_long_line_is_skipped_and_the_session_goes_on(short_model, toy_data_bin):
    proc = _interactive(short_model, toy_data_bin)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(_hypotheses(proc.stdout)) == [0, 2, 3]
    assert re.search(r"WARNING.*input line 1 has 41 source tokens .* more than the model's "
                     rf"{LIMIT} \(--max-source-positions\): skipped; pass --truncate-source",
                     proc.stderr), proc.stderr[-3000:]


@pytest.mark.slow
def test_over_long_line_is_truncated_under_truncate_source(short_model, toy_data_bin):
    proc = _interactive(short_model, toy_data_bin, "--truncate-source")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(_hypotheses(proc.stdout)) == [0, 1, 2, 3]
    source = re.search(r"^S-1\t(.*)$", proc.stdout, re.M).group(1).split()
    assert source == LINES[1].split()[: LIMIT - 1]
    assert re.search(rf"input line 1 has 41 source tokens .*: translating its first {LIMIT - 1} "
                     r"tokens \(--truncate-source\)", proc.stderr), proc.stderr[-3000:]
