"""bench_pooling_operator: a --quick run at tiny sizes writes a table of numbers."""

from __future__ import annotations

import re

import pytest

from scripts.benchmarks import bench_pooling_operator as bench


def _rows(markdown: str, header_start: str):
    """Body rows (lists of cells) of the first table whose header starts with header_start."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


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

    grid = _rows(report, "| n | k |")
    assert [(row[0], row[1]) for row in grid] == [
        ("64", "4"),
        ("64", "32"),
        ("256", "4"),
        ("256", "32"),
    ]
    for row in grid:
        skipped_goyal = int(row[0]) * int(row[1]) > 2048
        for cell in row:
            assert _is_number(cell) or (skipped_goyal and cell in ("skipped", "-")), row
        nccs = [float(c) for c in row[10:] if _is_number(c)]
        assert all(-1.0 <= value <= 1.0 + 1e-9 for value in nccs)
        assert float(row[10]) == pytest.approx(float(row[13]), abs=1e-6)  # batched == loop

    memory = _rows(report, "| case |")
    assert [row[0] for row in memory] == ["ours", "no_sort", "sort_once", "loop"]
    assert all(_is_number(cell) for row in memory for cell in row[1:])
    assert all(_is_number(cell) for row in _rows(report, "| ours ms |") for cell in row)
    parts = {row[0]: (float(row[1]), row[2]) for row in _rows(report, "| part | ms |")}
    assert list(parts)[:2] == ["ours (sorted before every round)", "no_sort"]
    difference = parts["difference (the sort share)"][0]
    ranking = parts["of which the ranking calls (sorts of the scores)"][0]
    rest = parts["of which reading scores and vectors in rank order, not position order"][0]
    # cells have 3 significant digits
    assert ranking > 0 and ranking + rest == pytest.approx(difference, rel=0.02, abs=2e-3)
    for name in ("time_vs_n", "time_vs_k", "nccs_vs_n", "nccs_vs_k"):
        assert (tmp_path / f"bench_pooling_operator_{name}.png").stat().st_size > 1000


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--ks", "0"])
    assert "--ks must be positive" in capsys.readouterr().err
