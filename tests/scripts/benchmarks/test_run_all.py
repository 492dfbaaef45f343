"""run_all (`make bench`): runs every bench script with the same thread count, collects their
tables and plots into docs/benchmarks.md, and reports failures."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from scripts.benchmarks import run_all

GOOD = '''
import argparse, os, pathlib, sys
parser = argparse.ArgumentParser()
parser.add_argument("--out", type=pathlib.Path, required=True)
parser.add_argument("--quick", action="store_true")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--lengths", type=int, nargs="+", default=[8])
args = parser.parse_args()
args.out.mkdir(parents=True, exist_ok=True)
(args.out / "bench_good_time.png").write_bytes(b"\\x89PNG fake")
(args.out / "bench_good_extra.png").write_bytes(b"\\x89PNG fake")
# torch's pool as the process starts, before the script sets anything itself (torch is
# imported, 1.6 CPU s, only for the test that reads it)
if os.environ.get("BENCH_GOOD_TORCH"):
    import torch
    pool = torch.get_num_threads()
else:
    pool = "-"
(args.out / "bench_good.md").write_text(
    "# bench_good\\n\\n| n | ratio |\\n|---|---|\\n| 8 | 2.5 |\\n\\nquick=" + str(args.quick)
    + f"\\n\\nthreads={args.threads} torch_threads={pool} "
    + f"mkl={os.environ.get('MKL_NUM_THREADS')} lengths={args.lengths}"
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


def test_collects_tables_and_plots_into_the_page_and_reports_failures(tmp_path, capsys):
    scripts = write_scripts(tmp_path / "scripts")
    out = tmp_path / "bench" / "out"
    page = tmp_path / "docs" / "benchmarks.md"
    (page.parent / "benchmarks").mkdir(parents=True)
    (page.parent / "benchmarks" / "bench_gone.png").write_bytes(b"from an earlier run")
    code = run_all.main(["--scripts-dir", str(scripts), "--out", str(out), "--report",
                         str(page), "--quick"])
    assert code == 1  # a script failed; the page is still written
    report = page.read_text()
    summary = report[: report.index("## bench_fail")]
    assert "| bench_good | ok |" in summary
    assert "| bench_fail | failed (exit 3) |" in summary
    assert "| bench_silent | no table written" in summary
    assert "helper" not in report
    good = report[report.index("## bench_good"):]
    assert "### bench_good" in good  # the script's own title, under the section
    assert "| 8 | 2.5 |" in good and "quick=True" in good
    # plots are copied beside the page and linked from there
    assert "![time](benchmarks/bench_good_time.png)" in good
    assert "![bench_good_extra](benchmarks/bench_good_extra.png)" in good  # unreferenced plot
    assert good.count("bench_good_time.png") == 1
    assert sorted(p.name for p in (page.parent / "benchmarks").iterdir()) == [
        "bench_good_extra.png", "bench_good_time.png"]
    assert "(https://example.org/x.png)" in good  # absolute links untouched
    assert "something broke" in report  # the failing script's log tail
    assert "[bench_fail.log](../bench/out/bench_fail.log)" in report
    assert "something broke" in (out / "bench_fail.log").read_text()
    assert "not ok: bench_fail, bench_silent" in capsys.readouterr().out


def test_page_says_how_it_was_made(tmp_path):
    scripts = write_scripts(tmp_path / "scripts")
    page = tmp_path / "benchmarks.md"
    run_all.main(["--scripts-dir", str(scripts), "--out", str(tmp_path / "o"), "--report",
                  str(page), "--only", "bench_good", "--threads", "2"])
    head = page.read_text().split("## bench_good")[0]
    settings = dict(re.findall(r"^\| ([^|]+?) \| (.+?) \|$", head, flags=re.M))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=run_all.REPO_ROOT,
                            capture_output=True, text=True).stdout.strip()
    assert settings["commit"].startswith(commit)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", settings["date"])
    assert "CPU cores" in settings["machine"]
    assert settings["threads"].startswith("2 ")
    assert "--threads 2" in settings["command"]
    assert settings["sizes"] == "full"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="torch caps its threads at the cores")
def test_threads_reach_every_script_and_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a value set outside does not win
    monkeypatch.setenv("BENCH_GOOD_TORCH", "1")  # it imports torch and says its pool
    scripts = write_scripts(tmp_path / "scripts")
    out = tmp_path / "o"
    run_all.main(["--scripts-dir", str(scripts), "--out", str(out), "--report",
                  str(tmp_path / "r.md"), "--only", "bench_good", "--threads", "2"])
    assert "threads=2 torch_threads=2 mkl=2" in (out / "bench_good.md").read_text()


def test_every_real_bench_script_sets_torch_threads_from_its_flag(tmp_path):
    names = [p.stem for p in run_all.find_scripts(run_all.SCRIPTS)]
    assert len(names) >= 5 and "run_all" not in names
    for name in names:
        module = importlib.import_module(f"scripts.benchmarks.{name}")
        args = module.parse_args(["--out", str(tmp_path), "--quick", "--threads", "3"])
        assert (args.out, args.quick, args.threads) == (tmp_path, True, 3), name
        assert "torch.set_num_threads(args.threads)" in Path(module.__file__).read_text(), name


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
    assert "![time](r/bench_good_time.png)" in text


def test_script_args_reach_that_script_only_and_the_page_quotes_them(tmp_path):
    scripts = write_scripts(tmp_path / "scripts")
    out, page = tmp_path / "o", tmp_path / "r.md"
    run_all.main(["--scripts-dir", str(scripts), "--out", str(out), "--report", str(page),
                  "--only", "bench_good", "--quick",
                  "--script-args", "bench_good=--lengths 1024 4096",
                  "--script-args", "bench_other=--lengths 3"])
    assert "lengths=[1024, 4096]" in (out / "bench_good.md").read_text()
    assert "--script-args 'bench_good=--lengths 1024 4096'" in page.read_text()


def test_malformed_script_args_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as stop:
        run_all.main(["--scripts-dir", str(tmp_path), "--script-args", "no-equals-sign"])
    assert stop.value.code == 2


def test_no_scripts_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run_all.main(["--scripts-dir", str(tmp_path / "empty"), "--out",
                         str(tmp_path / "o")]) == 2
    assert "no bench_*.py scripts" in capsys.readouterr().err


def test_make_bench_writes_the_docs_page():
    args = run_all.parse_args([])
    assert args.report == run_all.REPO_ROOT / "docs" / "benchmarks.md"
    assert args.threads == 1
    makefile = (run_all.REPO_ROOT / "Makefile").read_text()
    assert "-m scripts.benchmarks.run_all" in makefile.split("\nbench:")[1].split("\n\n")[0]
