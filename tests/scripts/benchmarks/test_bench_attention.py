"""The benchmark scripts: measurement helpers, the ratio logic, and --quick runs end to end."""

from __future__ import annotations

import math
import re
import time

import pytest
import torch

from scripts.benchmarks import (
    bench_attention,
    bench_attention_gpu,
    bench_relu_former_training,
    bench_relu_speed,
)
from scripts.benchmarks.benchmarking import (
    PeakTensorMemory,
    interleaved_median_seconds,
    peak_memory_bytes,
)
from scripts.common.plotting import markdown_table

from helpers import read_markdown_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_peak_memory_tracks_live_storages_exactly():
    with PeakTensorMemory() as mem:
        a = torch.ones(1000)  # 4000 bytes
        b = torch.ones(2000)  # 8000 bytes, 12000 alive
        del a
        c = torch.ones(500)  # 2000 bytes, 10000 alive
    assert mem.peak_bytes == 12000
    assert mem.current_bytes == 10000
    del b, c


def test_peak_memory_sees_the_backward_pass():
    n = 4096
    x = torch.randn(n, requires_grad=True)
    y = x.exp()  # forward outside: only backward's allocations are measured
    peak = peak_memory_bytes(lambda: y.sum().backward())
    # exp's backward allocates grad * result (n floats), which becomes x.grad
    assert 4 * n <= peak <= 4 * n + 64
    assert torch.equal(x.grad, y.detach())


def test_interleaved_median_runs_every_case_warmup_plus_rounds_times():
    calls = {"short": 0, "long": 0}

    def case(name, seconds):
        def step():
            calls[name] += 1
            time.sleep(seconds)
        return step

    medians = interleaved_median_seconds(
        {"short": case("short", 0.001), "long": case("long", 0.03)}, rounds=3, warmup=2)
    assert calls == {"short": 5, "long": 5}
    assert 0.001 <= medians["short"] < medians["long"]
    assert medians["long"] >= 0.03
    with pytest.raises(ValueError, match="rounds"):
        interleaved_median_seconds({"a": lambda: None}, rounds=0)


def test_interleaved_rounds_alternate_the_order_of_the_cases():
    order = []
    interleaved_median_seconds({name: (lambda n=name: order.append(n)) for name in "ab"},
                               rounds=3, warmup=1)
    assert "".join(order) == "abbaabba"


def test_interleaved_median_reads_the_clock_it_is_given():
    # a clock that a case moves on by its own cost: CPU time, whatever the wall clock did
    now = [0.0]
    costs = {"a": [5.0, 1.0, 2.0, 9.0], "b": [1.0, 4.0, 4.0, 3.0]}

    def case(name):
        return lambda: now.__setitem__(0, now[0] + costs[name].pop(0))

    medians = interleaved_median_seconds({name: case(name) for name in costs}, rounds=3,
                                         warmup=1, clock=lambda: now[0])
    assert medians == {"a": 2.0, "b": 4.0}


def test_markdown_table_formats_numbers_and_rejects_ragged_rows():
    table = markdown_table(["a", "b", "c"], [["x", 0.123456, 12345.6], ["y", 3, math.nan]])
    assert table.splitlines() == [
        "| a | b | c |", "|---|---|---|", "| x | 0.123 | 12346 |", "| y | 3 | nan |"]
    with pytest.raises(ValueError, match="2 cells"):
        markdown_table(["a", "b", "c"], [["x", 1]])


def test_ratio_rows_divide_the_right_cases_and_judge_the_targets():
    # {n: {case: (seconds, peak bytes)}}
    results = {
        1024: {"fairseq_sdpa": (2.0, 100.0), "softmax": (2.0, 100.0), "relu": (1.0, 100.0),
               "sparsemax": (4.0, 300.0), "relu_dense": (1.5, 200.0),
               "relu_chunked": (3.0, 10.0)},
        4096: {"fairseq_sdpa": (8.0, 100.0), "softmax": (8.0, 400.0), "relu": (10.0, 130.0),
               "sparsemax": (20.0, 900.0), "relu_dense": (10.0, 400.0),
               "relu_chunked": (11.0, 80.0)},
    }
    # read the table as the report prints it, cells by column name
    table = markdown_table(["ratio", "n", "value", "target", "met"],
                           bench_attention.ratio_rows(results))
    rows = {(r["ratio"], int(r["n"])): r for r in read_markdown_table(table, "ratio", "n")}

    def check(label, n, value, target, met):
        row = rows[(label, n)]
        assert float(row["value"]) == pytest.approx(value, rel=1e-3), (label, n, row)
        assert row["met"] == met, (label, n, row)
        if target is not None:
            assert row["target"] == target, (label, n, row)

    check("relu / fairseq_sdpa, time", 1024, 0.5, "<= 1", "yes")
    check("relu / fairseq_sdpa, time", 4096, 1.25, "<= 1", "NO")
    # the memory target holds at n = 4096 only
    check("relu / fairseq_sdpa, peak memory", 1024, 1.0, "-", "-")
    check("relu / fairseq_sdpa, peak memory", 4096, 1.3, None, "NO")
    check("relu / softmax (ours), time", 1024, 0.5, "<= 1", "yes")
    check("sparsemax / relu, time", 4096, 2.0, ">= 3", "NO")
    check("relu_chunked / relu_dense, peak memory", 1024, 0.05, "-", "-")
    check("relu_chunked / relu_dense, peak memory", 4096, 0.2, None, "yes")
    check("relu_chunked / relu_dense, time", 4096, 1.1, None, "yes")
    # cases that were not run give no row
    assert not any(label.startswith(("entmax15", "relu_matmuls")) for label, _ in rows)


def test_tile_matmuls_are_the_products_of_the_kernel_without_relu():
    """relu_matmuls times exactly U = (q k^T) v and its gradients, on the kernel's tiles."""
    q, k, v = (torch.randn(3, 700, 8, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    u = bench_attention.TileMatmuls.apply(q, k, v)
    want = (q @ k.transpose(1, 2)) @ v
    torch.testing.assert_close(u, want)
    grad = torch.randn_like(u)
    for a, b in zip(torch.autograd.grad(u, (q, k, v), grad),
                    torch.autograd.grad(want, (q, k, v), grad)):
        torch.testing.assert_close(a, b)


def ratio_table(markdown: str) -> dict[tuple[str, int], float]:
    """``{(ratio label, n): value}`` from the 'ratio | n | value | target | met' table."""
    found = {}
    for label, n, value in re.findall(r"^\| ([^|]+/[^|]+) \| (\d+) \| ([^|]+) \|", markdown,
                                      flags=re.M):
        found[(label.strip(), int(n))] = float(value)
    return found


@pytest.mark.slow
def test_bench_attention_quick_writes_ratio_table_and_plots(tmp_path, capsys, one_thread):
    # main() in this process, as the other benchmarks' tests call theirs (one_thread puts back
    # the thread count it sets); one timed round: the test reads which ratios there are, not
    # how fast, and a peak memory does not depend on the rounds
    assert bench_attention.main(["--quick", "--rounds", "1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_attention.md").read_text()
    assert text.strip() in capsys.readouterr().out
    ratios = ratio_table(text)
    lengths = [int(n) for n in bench_attention.QUICK_LENGTHS]
    for label in ("relu / softmax (ours), time", "relu_nostats / softmax (ours), time",
                  "sparsemax / relu, time", "entmax15 / relu, time",
                  "relu_chunked / relu_dense, peak memory", "relu_chunked / relu_dense, time",
                  "relu / fairseq_sdpa, time", "relu / fairseq_sdpa, peak memory",
                  "relu_matmuls / fairseq_sdpa, time", "relu / relu_matmuls, time"):
        for n in lengths:
            value = ratios[(label, n)]
            assert math.isfinite(value) and value > 0, (label, n, value)
    # the key-chunked path holds less memory than the dense one once n exceeds the chunk, and
    # so does the fused kernel
    assert ratios[("relu_chunked / relu_dense, peak memory", max(lengths))] < 1
    assert ratios[("relu / relu_dense, peak memory", max(lengths))] < 1
    for name in ("bench_attention_time.png", "bench_attention_memory.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_bench_relu_former_training_quick_compares_words_per_second(tmp_path, one_thread,
                                                                    loggers_restored):
    # main() in this process (its models train in it either way); one_thread and
    # loggers_restored put back the thread count and the fairseq log levels it sets; one
    # timed round: the test reads which figures there are, not their values
    assert bench_relu_former_training.main(["--quick", "--rounds", "1",
                                            "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_relu_former_training.md").read_text()
    rows = re.findall(r"^\| relu_former / transformer, words/s \((\w+)\) \| (\d+) \| ([^|]+) \|",
                      text, flags=re.M)
    assert {setting for setting, _, _ in rows} == {"sentence", "document"}
    assert {int(tokens) for _, tokens, _ in rows} == {32, 1024}
    for _, _, value in rows:
        assert math.isfinite(float(value)) and float(value) > 0
    wps = re.findall(r"^\| (sentence|document) \| \d+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|",
                     text, flags=re.M)
    assert len(wps) == 2 and all(float(v) > 0 for row in wps for v in row[1:])
    assert (tmp_path / "bench_relu_former_training.png").read_bytes()[:8] == PNG_MAGIC


def test_bench_attention_gpu_says_when_there_is_no_device(tmp_path, capsys, one_thread):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the benchmark would measure")
    assert bench_attention_gpu.main(["--quick", "--out", str(tmp_path)]) == 0
    assert "No CUDA device here" in capsys.readouterr().out
    assert "nothing measured" in (tmp_path / "bench_attention_gpu.md").read_text()


def test_without_a_device_the_page_carries_the_last_committed_gpu_report(tmp_path):
    from scripts.benchmarks.bench_attention_gpu import no_cuda_text

    assert "No GPU measurement is committed yet" in no_cuda_text(tmp_path / "absent.md")
    report = tmp_path / "gpu_check.md"
    report.write_text("# gpu_check on a GPU\n\n## Attention kernels\n\n| n | ms |\n")
    text = no_cuda_text(report)
    assert "nothing measured on this machine" in text and str(report) in text
    # one level down: the report's title under the script's own "# bench_attention_gpu"
    assert "\n## gpu_check on a GPU\n" in text and "\n### Attention kernels\n" in text
    assert "| n | ms |" in text


@pytest.mark.slow
def test_bench_relu_speed_prints_every_ratio_it_was_asked_for(tmp_path, one_thread,
                                                             loggers_restored):
    assert bench_relu_speed.main([
        "--quick", "--lengths", "32", "96", "--head-dims", "16", "32", "--documents", "64",
        "--decoder-length", "48", "--rounds", "1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_relu_speed.md").read_text()
    attention = re.findall(r"^\| (16|32) \| (32|96) \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.e+-]+) \|"
                           r" (yes|NO) \| ([\d.]*) \|", text, flags=re.M)
    assert {(d, n) for d, n, *_ in attention} == {("16", "32"), ("16", "96"), ("32", "32"),
                                                  ("32", "96")}
    # the memory ratio is measured at the longest n only
    assert all(bool(memory) == (n == "96") for _, n, _, _, memory in attention)
    decoder = re.findall(r"^\| (self, causal|self, causal, padded|cross|cross, padded|"
                         r"incremental step) \| [\d.]+ \| [\d.]+ \| ([\d.e+-]+) \|", text,
                         flags=re.M)
    assert len(decoder) == 5
    training = re.findall(r"^\| 64 \| (sentences|64-token documents) \| [\d.]+ \| [\d.]+ \| "
                          r"([\d.e+-]+) \|", text, flags=re.M)
    assert {data for data, _ in training} == {"sentences", "64-token documents"}
    for value in [v for *_, v, _, _ in attention] + [v for _, v in decoder + training]:
        assert math.isfinite(float(value)) and float(value) > 0


def test_bench_relu_speed_measures_only_the_tables_asked_for(tmp_path, one_thread,
                                                             loggers_restored):
    assert bench_relu_speed.main(["--quick", "--tables", "decoder", "--decoder-length", "24",
                                  "--rounds", "1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_relu_speed.md").read_text()
    assert "## Decoder attentions" in text
    assert "## One attention" not in text and "## Training" not in text
