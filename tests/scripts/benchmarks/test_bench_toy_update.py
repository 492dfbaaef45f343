"""bench_toy_update: a --quick run on fixture catalogs reads the table's data (Table 4's tiny
data, built once for the test run) and builds its BPE variants, and reports the cost of every
vocabulary and the profile's groups."""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from scripts.benchmarks import bench_toy_update as bench
from scripts.common.child_processes import KEEP_BIG_BLOCKS

from helpers import run_command


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the markdown table after ``heading``."""
    section = text.split(heading)[1].split("\n## ")[0]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]


@pytest.mark.slow
def test_quick_run_reports_every_vocabulary_and_the_profile(tmp_path, table4_data):
    out = tmp_path / "out"
    # the table's data, as a reproduction builds it (tests/scripts/conftest.py), where --quick
    # keeps it; its key names the catalogs' folder
    shutil.copytree(table4_data / "work" / "data", out / "data")
    locale = (table4_data / "locale").resolve()
    # started with the children's allocator settings, as the process it would start itself
    # again as without them (the test below): one interpreter importing torch, not two
    proc = run_command([sys.executable, "-m", "scripts.benchmarks.bench_toy_update", "--quick",
                        "--out", out, "--locale-dir", locale, "--bpe-merges", "30", "60"],
                       cwd=tmp_path, env=KEEP_BIG_BLOCKS)
    text = (out / "bench_toy_update.md").read_text()
    assert text == proc.stdout.rstrip("\n") + "\n"
    # the report names the allocator settings it ran with
    assert all(f"{name}={value}" in text for name, value in KEEP_BIG_BLOCKS.items())

    rows = table_rows(text, "## Cost per update")
    assert [(row[0], row[1]) for row in rows] == [
        (variant, row) for variant in ("word", "bpe30", "bpe60") for row in bench.ROWS]
    folders = dict(table_rows(text, "## Data"))
    for row in rows:
        variant = row[0]
        types, tokens, updates = (int(cell) for cell in (row[2], row[3], row[5]))
        # the dictionary the model was built with: fairseq's 4 specials and the file's types
        data = Path(folders[variant]) / "bin" / "sentences"
        assert data.parents[2] == out / "data"  # --quick keeps its data under --out
        assert types == 4 + len((data / "dict.en.txt").read_text().splitlines())
        # the epoch's target tokens: every training sentence's tokens and its EOS
        raw = (data.parent.parent / "raw" / "sentences" / "train.en").read_text().splitlines()
        assert tokens == sum(len(line.split()) + 1 for line in raw)
        assert 1 <= updates <= len(raw)
        figures = [float(cell) for cell in row[4:]]
        assert all(math.isfinite(value) and value > 0 for value in figures), row
        if variant == "word":
            assert figures[0] == 1 and figures[-1] == 1
    # BPE of more merges: more types, and the same sentences in no more pieces
    types = {row[0]: int(row[2]) for row in rows}
    tokens = {row[0]: int(row[3]) for row in rows}
    assert types["bpe30"] < types["bpe60"] and tokens["bpe30"] >= tokens["bpe60"]

    profile = table_rows(text, "## Where a word-level update's time goes")
    assert [row[0] for row in profile] == list(bench.GROUPS)
    for column in range(1, 1 + len(bench.ROWS)):
        shares = [float(row[column]) for row in profile]
        assert all(share >= 0 for share in shares)
        assert sum(shares) == pytest.approx(100, abs=0.5)  # 3 digits a share
        assert shares[0] > 0  # the output layer is always there


def test_started_without_the_allocator_settings_it_starts_again_with_them(monkeypatch):
    """glibc reads them at start-up: the command without them replaces itself (execve) by the
    same module and arguments with them added to its environment; with them, it runs."""
    started = []

    def execve(path, argv, env):
        started.append((path, argv, env))
        raise SystemExit(0)  # execve does not return

    monkeypatch.setattr(bench.os, "execve", execve)
    monkeypatch.setattr(sys, "argv", ["bench_toy_update.py", "--quick", "--out", "x"])
    for name in KEEP_BIG_BLOCKS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit):
        bench.with_allocator_settings(lambda: pytest.fail("ran without the settings"))
    (path, argv, env), = started
    assert path == sys.executable and argv == [
        sys.executable, "-m", "scripts.benchmarks.bench_toy_update", "--quick", "--out", "x"]
    assert env == {**os.environ, **KEEP_BIG_BLOCKS}
    for name, value in KEEP_BIG_BLOCKS.items():
        monkeypatch.setenv(name, value)
    assert bench.with_allocator_settings(lambda: 7) == 7 and len(started) == 1


def test_bad_sizes_are_refused():
    for flags in (["--batches", "0"], ["--rounds", "0"], ["--bpe-merges", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(flags)


def test_a_backward_operator_falls_in_its_forward_operators_group():
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    vocab, width = 37, 8
    inputs = torch.randn(2, 5, width, requires_grad=True)
    projection = torch.nn.Linear(width, width)
    output = torch.nn.Linear(width, vocab, bias=False)
    optimizer = torch.optim.Adam([*projection.parameters(), *output.parameters()])
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        hidden = torch.nn.functional.dropout(projection(inputs), 0.5, training=True)
        hidden = torch.nn.functional.scaled_dot_product_attention(hidden, hidden, hidden)
        torch.log_softmax(output(hidden), -1).sum().backward()
        optimizer.step()
    events = prof.events()
    forward = bench.forward_operators(events)
    groups: dict[str, set] = {}
    for event in events:
        backward = any(node.name.startswith(bench.BACKWARD) for node in bench.chain_of(event))
        groups.setdefault(bench.group_of(event, forward, vocab), set()).add(
            (backward, event.name))
    # forward and backward of the output layer, log-softmax and its gradient
    assert {(False, "aten::_log_softmax"), (True, "aten::_log_softmax_backward_data"),
            (False, "aten::mm"), (True, "aten::mm")} <= groups["vocabulary"]
    # the gradient of the attention and of the dropout mask, found through the forward op
    assert any(backward for backward, _ in groups["attention"])
    assert any(backward for backward, _ in groups["dropout"])
    assert (False, "aten::addmm") in groups["other matrix products"]
    assert any(name.startswith("Optimizer.step") for _, name in groups["optimizer step"])
    assert set(groups) <= set(bench.GROUPS)
