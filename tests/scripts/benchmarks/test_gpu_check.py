"""The GPU check's CPU-side parts: flags, refusing to run without CUDA, log parsing, reports."""

import argparse

import pytest
import torch

from scripts.benchmarks import bench_attention_gpu, gpu_check


def test_defaults_and_quick():
    args = gpu_check.parse_args([])
    assert args.lengths == [1024, 2048, 4096, 8192, 16384] and args.updates == 100
    assert args.head_dims == [64, 128]
    quick = gpu_check.parse_args(["--quick", "--skip", "train"])
    assert quick.lengths == [1024, 2048] and quick.rounds == 3 and quick.skip == ["train"]
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--updates", "0"])


def test_fails_fast_and_clearly_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    # main() in this process: a SystemExit of a message is what the command prints on its
    # stderr before exiting with status 1 (a new interpreter importing torch shows no more)
    with pytest.raises(SystemExit) as refused:
        gpu_check.main(["--out", str(tmp_path)])
    assert str(refused.value.code).startswith("gpu_check: no CUDA device here")
    assert not (tmp_path / "gpu_check.md").exists()


def test_reads_fairseq_wps_and_pytest_summaries():
    log = ("2026-01-01 | INFO | train_inner | epoch 001:     10 / 120 loss=9.1, wps=1234.5, "
           "ups=3\n2026-01-01 | INFO | train | epoch 001 | loss 8.2 | wps 2345.6 | ups 2\n")
    assert gpu_check.words_per_second(log) == 2345.6
    assert gpu_check.words_per_second("no numbers") is None
    assert gpu_check.pytest_summary("...\n==== 12 passed, 1 skipped in 3.2s ====\n") == \
        "12 passed, 1 skipped in 3.2s"


def test_report_from_fake_numbers(tmp_path):
    training = gpu_check.training_section({"relu_former_iwslt_de_en": 900.0,
                                           "transformer_iwslt_de_en": 1000.0}, 100)
    assert "relu_former / transformer words/s: 0.900" in training
    path = gpu_check.write_report(tmp_path / "r" / "gpu_check.md", "Fake GPU",
                                  [("Training words/s", training)])
    text = path.read_text()
    assert text.startswith("# gpu_check on Fake GPU")
    assert "| relu_former_iwslt_de_en | 900 |" in text
    assert not list(tmp_path.glob("r/*.tmp"))
    missing = gpu_check.training_section({"relu_former_iwslt_de_en": None,
                                          "transformer_iwslt_de_en": 1000.0}, 100)
    assert "not measured" in missing


def test_bench_ratios_from_fake_numbers():
    ms, mib = 1e-3, 2**20
    results = {1024: {"sdpa": (2 * ms, 100 * mib), "sdpa_dropout": (4 * ms, 200 * mib),
                      "relu_triton": (1 * ms, 50 * mib),
                      "relu_triton_stats_dropout": (5 * ms, 100 * mib)}}
    rows = {row[0]: row for row in bench_attention_gpu.ratio_rows(results)}
    assert rows["relu_triton / sdpa"][2:] == [0.5, 0.5, "< 1", "yes"]
    # a dropout case is compared with SDPA with dropout
    assert rows["relu_triton_stats_dropout / sdpa_dropout"][2:] == [1.25, 0.5, "<= 1", "NO"]
    args = argparse.Namespace(dtype="bfloat16", batch=4, heads=8, head_dim=64, dropout=0.1,
                              rounds=5)
    text = bench_attention_gpu.report(args, results, "Fake GPU")
    assert "on Fake GPU" in text and "| relu_triton / sdpa | 1024 | 0.5 |" in text


def test_bench_leaves_the_tiled_kernel_out_at_long_lengths():
    args = bench_attention_gpu.parse_args(["--tiled-max-length", "2048", "--cases",
                                           "relu_triton", "relu_tiled"])
    assert bench_attention_gpu.cases_at(args, 1024) == ["sdpa", "sdpa_dropout", "relu_triton",
                                                        "relu_tiled"]
    assert "relu_tiled" not in bench_attention_gpu.cases_at(args, 4096)


def test_parts_run_in_order_and_the_report_keeps_each_part_as_it_ends(tmp_path, monkeypatch):
    """Tests, then training, then the benchmark; a run cut during the benchmark (here: the
    second head size raising) leaves a report with the parts that ended."""
    calls = []

    def fake_run(command, log_path, env=None, timeout=600):
        calls.append(log_path.name)
        if log_path.name == "bench_d128.log":
            raise KeyboardInterrupt  # stands for the outer time limit
        if log_path.name.startswith("train_"):
            assert "--fp16" in command and "--bf16" not in command
            return 0, "epoch 001 | loss 8.2 | wps 1000.0 | ups 2\n", 1.0
        return 0, "==== 3 passed in 1.0s ====\n", 1.0

    monkeypatch.setattr(gpu_check, "require_cuda", lambda: "Fake GPU")
    monkeypatch.setattr(gpu_check, "run", fake_run)
    monkeypatch.setattr(gpu_check, "first_use_section",
                        lambda head_dims: ("| triton | float32 | 64 | passed (1.0 s) |", True))
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(["--out", str(tmp_path), "--quick"])
    assert calls == ["tests.log", "preprocess.log", "train_relu_former_iwslt_de_en.log",
                     "train_transformer_iwslt_de_en.log", "bench_d64.log", "bench_d128.log"]
    text = (tmp_path / "gpu_check.md").read_text()
    assert text.index("## First-use check") < text.index("## Correctness on CUDA") < \
        text.index("## Training words/s") < \
        text.index("## Attention kernels, head size 64")
    assert "3 passed" in text and "relu_former / transformer words/s: 1.000" in text
    assert "head size 128" not in text


def test_the_first_use_section_reports_each_check(monkeypatch):
    """Run on the CPU, where neither compiled GPU backend can pass: every row says why, the
    part fails, and the backends report follows."""
    from relu_former.relu_attention.kernels import first_use_check

    monkeypatch.setattr(first_use_check, "_results", {})
    body, passed = gpu_check.first_use_section([16], device="cpu")
    assert not passed
    rows = [line for line in body.splitlines() if line.startswith(("| triton", "| flex"))]
    assert len(rows) == 6 and all(" | 16 | raised " in row for row in rows), rows
    assert "| flex | bfloat16 | 16 |" in body
    assert "relu_former.help --backends" in body and "cpu: auto picks" in body
