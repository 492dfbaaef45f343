"""The benchmarks' shared command line and report writer."""

import argparse

from scripts.benchmarks.benchmarking import BenchmarkParser, finish_report


def parser() -> BenchmarkParser:
    parser = BenchmarkParser("A benchmark.\n\nMore.", quick_help="small sizes")
    parser.add_quick_argument("--rounds", 5, 3, "timed rounds", type=int)
    parser.add_quick_argument("--lengths", [8, 16], [8], "lengths", type=int, nargs="+")
    parser.add_threads_and_out("folder for the report")
    return parser


def test_quick_switches_only_the_defaults_left_unset():
    args = parser().parse_args([])
    assert (args.quick, args.rounds, args.lengths, args.threads, args.out) == (
        False, 5, [8, 16], 1, None)
    args = parser().parse_args(["--quick", "--lengths", "4", "--threads", "2"])
    assert (args.quick, args.rounds, args.lengths, args.threads) == (True, 3, [4], 2)
    assert parser().parse_args(["--quick", "--rounds", "9"]).rounds == 9


def test_help_states_both_defaults():
    text = parser().format_help()
    assert "A benchmark." in text and "More." not in text
    assert "(default 5; --quick 3)" in " ".join(text.split())


def test_finish_report_prints_and_writes_only_with_out(tmp_path, capsys):
    assert finish_report(argparse.Namespace(out=None), "bench_x", "| a |") is None
    assert capsys.readouterr().out == "| a |\n" and not list(tmp_path.iterdir())
    page = finish_report(argparse.Namespace(out=tmp_path / "o"), "bench_x", "| a |", "\n![p](p)")
    assert page == tmp_path / "o" / "bench_x.md"
    assert page.read_text() == "| a |\n![p](p)" and capsys.readouterr().out == "| a |\n"
    assert [p.name for p in page.parent.iterdir()] == ["bench_x.md"]
