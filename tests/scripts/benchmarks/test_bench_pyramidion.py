"""bench_pyramidion: a tiny run writes the ratio table and the plot; bad sizes are refused."""

from __future__ import annotations

import re

import pytest

from scripts.benchmarks import bench_pyramidion as bench

TINY = ["--length", "64", "--embed-dim", "16", "--layers", "2", "--vocab", "40",
        "--target-length", "6", "--decode-steps", "2", "--rounds", "1"]


def test_tiny_run_writes_ratios_and_plot(tmp_path, capsys):
    assert bench.main([*TINY, "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_pyramidion.md").read_text()
    assert (tmp_path / "bench_pyramidion.png").stat().st_size > 0
    assert "--pooling-schedule 1:32,2:16" in text and "--attention-block-size 4" in text
    assert text == capsys.readouterr().out.rstrip("\n") + "\n\n![ratios](bench_pyramidion.png)\n"
    for measure in ("training step time", "decoding time", "encoder forward time",
                    "training step peak MiB", "decoding peak MiB"):
        row = re.search(rf"^\| {measure}[^|]* \| ([\d.e+-]+) \| ([\d.e+-]+) \| ([\d.e+-]+) \|",
                        text, flags=re.M)
        assert row, measure
        assert all(float(value) > 0 for value in row.groups())
    assert re.search(r"\| >= 3.0 \| pyramidion: (yes|NO), pyramidion_blocks: (yes|NO) \|", text)


@pytest.mark.parametrize("flags", [["--pooled", "32", "--length", "64"], ["--decode-steps", "-1"]])
def test_bad_sizes_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(flags)
    assert "must be" in capsys.readouterr().err
