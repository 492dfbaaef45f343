"""bench_pyramidion: a tiny run writes the ratio table and the plot; bad sizes are refused."""

from __future__ import annotations

import re

import pytest

from scripts.benchmarks import bench_pyramidion as bench

TINY = ["--length", "64", "--embed-dim", "16", "--layers", "3", "--vocab", "40",
        "--target-length", "6", "--decode-steps", "2", "--rounds", "1"]


def test_tiny_run_writes_ratios_and_plot(tmp_path, capsys):
    assert bench.main([*TINY, "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_pyramidion.md").read_text()
    assert (tmp_path / "bench_pyramidion.png").stat().st_size > 0
    assert "--pooling-schedule 2:32,3:16" in text and "--attention-block-size 4" in text
    assert text == capsys.readouterr().out.rstrip("\n") + "\n\n![ratios](bench_pyramidion.png)\n"
    header = "| measure | full attention: vanilla / pyramidion | blocks: blockwise / " \
             "pyramidion_blocks | paper target | met |"
    assert header in text
    number = r"([\d.e+-]+)"
    values = {}
    for measure in ("training step time", "decoding time", "encoder forward time",
                    "training step peak MiB", "decoding peak MiB"):
        row = re.search(rf"^\| {measure}[^|]* \| {number} \| {number} \|", text, flags=re.M)
        assert row, measure
        values[measure] = [float(value) for value in row.groups()]
        assert all(value > 0 for value in values[measure])
    assert re.search(r"\| >= 3.0 \| full attention: (yes|NO), blocks: (yes|NO) \|", text)
    # the limit: layers 1..2 (before the first pooling) bound the training speed-up
    bound = re.search(rf"^\| bound on the training speed-up[^|]*\| {number} \| {number} \|",
                      text, flags=re.M)
    measured = re.search(rf"^\| measured training speed-up \| {number} \| {number} \|", text,
                         flags=re.M)
    assert bound and measured and "Layers 1..2 run at the full 64 tokens" in text
    torch_ratios = [float(value) for value in measured.groups()]
    assert torch_ratios == pytest.approx(values["training step time"], rel=1e-3)


@pytest.mark.parametrize("flags", [["--pooled", "32", "--length", "64"], ["--decode-steps", "-1"],
                                   ["--layers", "1"]])
def test_bad_sizes_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(flags)
    assert "must be" in capsys.readouterr().err
