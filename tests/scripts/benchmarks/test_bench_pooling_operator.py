"""bench_pooling_operator: a --quick run at tiny sizes writes a table of numbers."""

from __future__ import annotations

import re

import pytest

from scripts.benchmarks import bench_pooling_operator as bench

from helpers import read_markdown_table


def _is_number(cell: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?(e[-+]?\d+)?%?", cell) is not None


def test_quick_run_writes_tables_and_plots(tmp_path, capsys):
    code = bench.main([
        "--quick", "--lengths", "64", "256", "--ks", "4", "32", "--rounds", "1",
        "--big-batch", "8", "--memory-shape", "128", "16", "--goyal-max-work", "2048",
        "--out", str(tmp_path),
    ])  # fmt: skip
    assert code == 0
    report = (tmp_path / "bench_pooling_operator.md").read_text()
    assert capsys.readouterr().out.strip() in report

    grid = read_markdown_table(report, "n", "k")
    assert [(row["n"], row["k"]) for row in grid] == [
        ("64", "4"),
        ("64", "32"),
        ("256", "4"),
        ("256", "32"),
    ]
    for row in grid:
        skipped_goyal = int(row["n"]) * int(row["k"]) > 2048
        for cell in row.values():
            assert _is_number(cell) or (skipped_goyal and cell in ("skipped", "-")), row
        nccs = [float(cell) for column, cell in row.items()
                if column.startswith("nCCS") and _is_number(cell)]
        assert len(nccs) == (4 if skipped_goyal else 5)
        assert all(-1.0 <= value <= 1.0 + 1e-9 for value in nccs)
        # batched == loop
        assert float(row["nCCS ours"]) == pytest.approx(float(row["nCCS loop"]), abs=1e-6)

    memory = read_markdown_table(report, "case")
    assert [row["case"] for row in memory] == ["ours", "no_sort", "sort_once", "loop"]
    assert all(_is_number(cell) for row in memory for column, cell in row.items()
               if column != "case")
    assert all(_is_number(cell) for row in read_markdown_table(report, "ours ms")
               for cell in row.values())
    parts = {row["part"]: float(row["ms"]) for row in read_markdown_table(report, "part", "ms")}
    assert list(parts)[:2] == ["ours (sorted before every round)", "no_sort"]
    difference = parts["difference (the sort share)"]
    ranking = parts["of which the ranking calls (sorts of the scores)"]
    rest = parts["of which reading scores and vectors in rank order, not position order"]
    # cells have 3 significant digits
    assert ranking > 0 and ranking + rest == pytest.approx(difference, rel=0.02, abs=2e-3)
    for name in ("time_vs_n", "time_vs_k", "nccs_vs_n", "nccs_vs_k"):
        assert (tmp_path / f"bench_pooling_operator_{name}.png").stat().st_size > 1000


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--ks", "0"])
    assert "--ks must be positive" in capsys.readouterr().err
