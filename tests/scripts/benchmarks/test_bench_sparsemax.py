"""bench_sparsemax.py: a small real run writes its table, and the two sorts agree."""

from scripts.benchmarks import bench_sparsemax

from helpers import read_markdown_table


def test_bench_sparsemax_small_run_reports_supports_times_and_identical_results(tmp_path, capsys,
                                                                               one_thread):
    # main() in this process, as the other benchmarks' small runs (its status is the process's
    # exit status: 0, every row identical); one_thread puts back the thread count it sets
    assert bench_sparsemax.main(["--quick", "--lengths", "16", "96", "--score-stds", "0.01",
                                 "3", "--rounds", "1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "bench_sparsemax.md").read_text()
    assert text.strip() in capsys.readouterr().out
    rows = read_markdown_table(text, "activation", "n")
    assert {(row["activation"], int(row["n"]), float(row["score std"])) for row in rows} == {
        (name, n, std) for name in ("sparsemax", "entmax15") for n in (16, 96)
        for std in (0.01, 3.0)}
    for row in rows:
        assert row["identical"] == "yes"
        assert 1 <= float(row["mean support"]) <= int(row["max support"]) <= int(row["n"])
        assert float(row["full / partial"]) > 0
    # flat scores keep (nearly) every key, sharp ones a few: the support the sort depends on
    flat = {(r["activation"], int(r["n"])): int(r["max support"]) for r in rows
            if float(r["score std"]) == 0.01}
    sharp = {(r["activation"], int(r["n"])): int(r["max support"]) for r in rows
             if float(r["score std"]) == 3.0}
    assert flat[("sparsemax", 96)] > 64 > sharp[("sparsemax", 96)]
