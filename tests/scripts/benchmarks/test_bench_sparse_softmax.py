"""bench_sparse_softmax.py and plot_loss_curves.py: ratio logic, and small real runs."""

import argparse
import json
import math
import re
import sys

import pytest

from scripts.analysis import plot_loss_curves
from scripts.benchmarks import bench_sparse_softmax

from helpers import read_markdown_table, run_command

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_ratio_table_judges_the_target_case_only():
    results = {  # {V: {case: (seconds, peak bytes)}}
        1000: {"baseline": (1.0, 100.0), "k=20": (2.0, 40.0)},
        32000: {"baseline": (4.0, 1000.0), "k=5": (1.0, 300.0), "k=20": (1.6, 700.0)},
    }
    args = argparse.Namespace(tokens=64, label_smoothing=0.1, rounds=1)
    table = read_markdown_table(bench_sparse_softmax.report(args, results, None), "V", "k")
    rows = {(int(row["V"]), int(row["k"])): row for row in table}
    assert sorted(rows) == [(1000, 20), (32000, 5), (32000, 20)]
    met = next(column for column in table[0] if column.startswith("target met"))
    assert "V=32000, k=20" in met
    assert float(rows[(1000, 20)]["time ratio"]) == 2.0 and rows[(1000, 20)][met] == "-"
    assert float(rows[(1000, 20)]["memory ratio"]) == pytest.approx(0.4)
    assert float(rows[(32000, 5)]["time ratio"]) == 0.25 and rows[(32000, 5)][met] == "-"
    # time 0.4 <= 0.5 but memory 0.7 > 0.6: the target is not met
    target = rows[(32000, 20)]
    assert float(target["ours ms"]) == 1600 and float(target["LS-CE ms"]) == 4000
    assert float(target["time ratio"]) == pytest.approx(0.4)
    assert float(target["ours MiB"]) == pytest.approx(700 / 2**20, rel=1e-3)
    assert float(target["LS-CE MiB"]) == pytest.approx(1000 / 2**20, rel=1e-3)
    assert float(target["memory ratio"]) == pytest.approx(0.7)
    assert target[met] == "NO"


@pytest.mark.slow
def test_bench_sparse_softmax_small_run_writes_table_and_plots(tmp_path, capsys, one_thread):
    # main() in this process (one_thread puts back the thread count it sets): with --no-rss
    # it starts no process and needs none of its own
    assert bench_sparse_softmax.main([
        "--vocab-sizes", "1000", "4000", "--ks", "5", "20", "--tokens", "64", "--rounds", "1",
        "--no-rss", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_sparse_softmax.md").read_text()
    assert text.strip() in capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \| (\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| "
                      r"([^|]+) \| ([^|]+) \|", text, flags=re.M)
    assert {(int(v), int(k)) for v, k, *_ in rows} == {(1000, 5), (1000, 20), (4000, 5),
                                                       (4000, 20)}
    for *_, time_ratio, _, _, memory_ratio in rows:
        assert math.isfinite(float(time_ratio)) and float(time_ratio) > 0
        assert 0 < float(memory_ratio) < 0.6  # the criterion never builds V-wide log-probs
    for name in ("bench_sparse_softmax_time.png", "bench_sparse_softmax_memory.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_fresh_process_rss_growth_sees_the_memory_difference(tmp_path):
    growth = {}
    for case in ("ours", "baseline"):
        proc = run_command([sys.executable, "-m", "scripts.benchmarks.bench_sparse_softmax",
                            "--rss-child",
                            case, "--vocab-sizes", "16000", "--ks", "20", "--tokens", "1024"],
                           cwd=tmp_path)
        growth[case] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_growth_bytes"]
    # one float32 tensor of the logits' size: 64 MB, above glibc's largest mmap threshold, so
    # it is always fresh memory and shows in the resident size
    tensor = 1024 * 16000 * 4
    assert growth["ours"] >= 0.8 * tensor  # at least the gradient of the logits
    assert growth["baseline"] >= 2 * tensor and growth["ours"] < 0.6 * growth["baseline"]


@pytest.mark.slow
def test_plot_loss_curves_on_toy_data(tmp_path, capsys):
    # main() in this process: its fairseq commands are processes, it needs none of its own
    assert plot_loss_curves.main([
        "--toy", "--max-update", "6", "--sparse-softmax-k", "5", "--max-tokens", "500",
        "--model-args",
        "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
        "--encoder-ffn-embed-dim 32 --decoder-ffn-embed-dim 32 --encoder-attention-heads 2 "
        "--decoder-attention-heads 2", "--out", str(tmp_path),
    ]) == 0
    text = (tmp_path / "plot_loss_curves.md").read_text()
    assert text.strip() in capsys.readouterr().out
    for run in ("softmax", "sparse-softmax k=5"):
        for figure in ("loss", "nll_loss"):
            row = re.search(rf"^\| {re.escape(run)} \| {figure} \| (.*) \|$", text, flags=re.M)
            assert row, (run, figure, text)
            values = [float(v) for v in row.group(1).split(" | ")]
            assert all(math.isfinite(v) and v > 0 for v in values)
    assert (tmp_path / "plot_loss_curves.png").read_bytes()[:8] == PNG_MAGIC
