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
    # the paper's pairing (#3 full-attention vanilla / #13 blockwise Pyramidion), labelled,
    # beside the equal-attention ratios: vanilla / pyramidion_blocks from the raw times
    assert "## Equal-attention ratios" in text and "## The paper's pairing" in text
    raw = {}
    for measure in ("training step time", "decoding time"):
        row = re.search(rf"^\| {measure} \(s\) \| {number} \| {number} \| {number} \| "
                        rf"{number} \|", text.split("## Measured values")[1], flags=re.M)
        vanilla, _, _, pyramidion_blocks = (float(v) for v in row.groups())
        raw[measure] = vanilla / pyramidion_blocks
    pairing = text.split("## The paper's pairing")[1].split("##")[0]
    assert "vanilla #3 (full attention) / Pyramidion #13 (blocks): vanilla / " \
           "pyramidion_blocks" in pairing
    for measure, paper in (("training step time", "3.0x"), ("decoding time", "2.4x")):
        row = re.search(rf"^\| {measure} \(s\) \| {number} \| {re.escape(paper)} \| "
                        r"(yes|NO) \|", pairing, flags=re.M)
        assert row, (measure, pairing)
        assert float(row.group(1)) == pytest.approx(raw[measure], rel=2e-2)
        assert row.group(2) == ("yes" if float(row.group(1)) >= float(paper[:-1]) else "NO")


@pytest.mark.parametrize("flags", [["--pooled", "32", "--length", "64"], ["--decode-steps", "-1"],
                                   ["--layers", "1"]])
def test_bad_sizes_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(flags)
    assert "must be" in capsys.readouterr().err
