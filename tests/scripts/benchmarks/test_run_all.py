"""bench_all: runs every bench script, collects tables and plots, reports failures."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scripts.benchmarks import run_all

GOOD = '''
import argparse, pathlib, sys
parser = argparse.ArgumentParser()
parser.add_argument("--out", type=pathlib.Path, required=True)
parser.add_argument("--quick", action="store_true")
args = parser.parse_args()
args.out.mkdir(parents=True, exist_ok=True)
(args.out / "bench_good_time.png").write_bytes(b"\\x89PNG fake")
(args.out / "bench_good_extra.png").write_bytes(b"\\x89PNG fake")
(args.out / "bench_good.md").write_text(
    "# bench_good\\n\\n| n | ratio |\\n|---|---|\\n| 8 | 2.5 |\\n\\nquick=" + str(args.quick)
    + "\\n\\n![time](bench_good_time.png) [web](https://example.org/x.png)\\n")
'''
FAIL = 'import sys\nprint("something broke")\nsys.exit(3)\n'
SILENT = 'print("forgot to write a table")\n'


def write_scripts(folder: Path) -> Path:
    folder.mkdir()
    for name, body in (("bench_good", GOOD), ("bench_fail", FAIL), ("bench_silent", SILENT)):
        (folder / f"{name}.py").write_text(textwrap.dedent(body))
    (folder / "helper.py").write_text("raise SystemExit('not a bench script')\n")
    return folder


def test_collects_tables_and_plots_and_reports_failures(tmp_path, capsys):
    scripts = write_scripts(tmp_path / "scripts")
    out = tmp_path / "bench" / "out"
    code = run_all.main(["--scripts-dir", str(scripts), "--out", str(out), "--quick"])
    assert code == 1  # a script failed; the report is still written
    report = (tmp_path / "bench" / "report.md").read_text()
    summary = report[: report.index("## bench_fail")]
    assert "| bench_good | ok |" in summary
    assert "| bench_fail | failed (exit 3) |" in summary
    assert "| bench_silent | no table written" in summary
    assert "helper" not in report
    good = report[report.index("## bench_good"):]
    assert "### bench_good" in good  # the script's own title, under the section
    assert "| 8 | 2.5 |" in good and "quick=True" in good
    assert "![time](out/bench_good_time.png)" in good
    assert "![bench_good_extra](out/bench_good_extra.png)" in good  # unreferenced plot added
    assert good.count("bench_good_time.png") == 1
    assert "(https://example.org/x.png)" in good  # absolute links untouched
    assert "something broke" in report  # the failing script's log tail
    assert "something broke" in (out / "bench_fail.log").read_text()
    assert "not ok: bench_fail, bench_silent" in capsys.readouterr().out


def test_only_runs_the_named_scripts_and_reports_unknown_names(tmp_path):
    scripts = write_scripts(tmp_path / "scripts")
    out = tmp_path / "o"
    report = tmp_path / "r.md"
    code = run_all.main(["--scripts-dir", str(scripts), "--out", str(out), "--report",
                           str(report), "--only", "bench_good", "bench_nope"])
    text = report.read_text()
    assert code == 1
    assert "| bench_nope | missing (no such script" in text
    assert "| bench_good | ok |" in text and "quick=False" in text
    assert "bench_fail" not in text
    assert "![time](o/bench_good_time.png)" in text


def test_no_scripts_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run_all.main(["--scripts-dir", str(tmp_path / "empty"), "--out",
                           str(tmp_path / "o")]) == 2
    assert "no bench_*.py scripts" in capsys.readouterr().err


def test_every_real_bench_script_takes_out_and_quick():
    names = [p.stem for p in run_all.find_scripts(run_all.SCRIPTS)]
    assert names and "bench_all" not in names
    for name in names:
        text = (run_all.SCRIPTS / f"{name}.py").read_text()
        assert '"--out"' in text and '"--quick"' in text, name
