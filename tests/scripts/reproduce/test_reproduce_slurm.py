"""A tiny table on a real Slurm cluster (``--executor slurm``): its records equal those of
the local executor, and a job cancelled mid-training (scancel) resumes from its last
checkpoint when the same command runs again.

The cluster is the one-node localhost cluster of ``.ci/start_slurm`` (started here where this
runs as root and no cluster answers). Where Slurm is not installed the tests are skipped;
with ``RELU_FORMER_REQUIRE_SLURM=1`` (CI) they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from scripts.common.cpu_path import cpu_model
from scripts.reproduce.__main__ import main
from scripts.reproduce.cell_jobs import JOB_ID
from tests.scripts.reproduce.settings_args import copy_table4_data

from helpers import REPO_ROOT

pytestmark = pytest.mark.slow
TABLE = "relu_former_table4"
# one rate, 2 epochs of 4 updates (validated every 2): one cell
BUDGET = ["--set", "lr_grid=[0.01]", "--set", "lr_limits=[0.01,0.01]", "--set",
          "max_epoch=2", "--set", "plateau_max_epoch=2", "--set", "patience=1000"]


def _cluster_answers() -> bool:
    found = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return found.returncode == 0 and any(state in ("idle", "mixed", "allocated")
                                         for state in found.stdout.split())


@pytest.fixture(scope="module")
def slurm() -> None:
    required = os.environ.get("RELU_FORMER_REQUIRE_SLURM") == "1"
    why = None
    if shutil.which("sbatch") is None:
        why = "Slurm is not installed (.ci/start_slurm installs and starts one)"
    elif not _cluster_answers():
        if os.geteuid() == 0:
            subprocess.run([str(REPO_ROOT / ".ci" / "start_slurm")], check=False)
        if not _cluster_answers():
            why = "no Slurm cluster answers (.ci/start_slurm starts one, as root)"
    if why is not None:
        if required:
            pytest.fail(f"RELU_FORMER_REQUIRE_SLURM=1, but {why}")
        pytest.skip(why)


def arguments(tmp_path: Path, name: str, table4_data: Path, *extra: str) -> list:
    """The call's arguments, its work folder holding a copy of Table 4's tiny data (built once
    for the run, ``table4_data``): the calls read it instead of building it."""
    locale = copy_table4_data(table4_data, tmp_path / name)
    return [TABLE, "--scale", "tiny", "--seeds", "1", "--rows", "transformer", "--set",
            f"locale_dir={locale}", *BUDGET, *extra, "--work", str(tmp_path / name / "work"),
            "--out", str(tmp_path / name / "reproduction.md")]


def records(tmp_path: Path, name: str) -> dict:
    folder = tmp_path / name / "reproduction" / "cells" / "tiny" / TABLE
    return {path.name: json.loads(path.read_text()) for path in folder.glob("*.json")}


# what differs between two runs of one cell: when and where it ran, and how long it took
RUN_DEPENDENT = {"seconds", "cpu_seconds", "machine", "cpu", "load_average", "finished_at",
                 "commit"}


def learnt(record: dict) -> dict:
    """A record without the figures of when, where and how fast it ran."""
    figures = {key: value for key, value in record["figures"].items()
               if "seconds" not in key and "cpu" not in key and "per_second" not in key}
    return {**{k: v for k, v in record.items() if k not in RUN_DEPENDENT}, "figures": figures}


def test_a_table_on_slurm_records_what_the_local_executor_does(slurm, tmp_path, table4_data):
    assert main(arguments(tmp_path, "local", table4_data)) == 0
    assert main(arguments(tmp_path, "slurm", table4_data, "--executor", "slurm")) == 0
    local, on_slurm = records(tmp_path, "local"), records(tmp_path, "slurm")
    assert sorted(local) == sorted(on_slurm) and len(local) == 1
    (name,) = local
    assert learnt(on_slurm[name]) == learnt(local[name])
    # both name the float path they ran on (one machine here: the same)
    capability = torch.backends.cpu.get_cpu_capability()
    assert local[name]["cpu"] == on_slurm[name]["cpu"] == f"{cpu_model()}, torch {capability}"
    report = (tmp_path / "local" / "reproduction.md").read_text()
    assert f"; CPU {local[name]['cpu']}; report at" in report  # the footer names it too
    assert on_slurm[name]["figures"]["bleu"] == local[name]["figures"]["bleu"]
    assert len(local[name]["curve"]) == 4  # validated every 2 of its 8 updates
    # the job ran under Slurm: its log is in the work folder's jobs
    assert list((tmp_path / "slurm" / "work" / "jobs").rglob("*_log.out"))


def start(argv: list) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "scripts.reproduce", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO_ROOT)


def wait_for(test, what: str, runner: subprocess.Popen, seconds: float = 300) -> None:
    began = time.monotonic()
    while not test():
        assert runner.poll() is None, (what, runner.communicate())
        assert time.monotonic() - began < seconds, f"waited {seconds} s for {what}"
        time.sleep(0.1)


def test_a_cancelled_job_resumes_and_a_stopped_runner_leaves_its_job_to_the_next(
        slurm, tmp_path, capsys, table4_data):
    # 12 epochs of 4 updates: long enough to be cancelled after its first checkpoint
    argv = arguments(tmp_path, "run", table4_data, "--executor", "slurm", "--set", "max_epoch=12",
                     "--set", "plateau_max_epoch=12")
    work = tmp_path / "run" / "work"

    def log() -> Path | None:
        return next(work.rglob("train.log"), None)

    def saved() -> bool:  # validated and saved: a cut training resumes from there
        found = log()
        return (found is not None and (found.parent / "checkpoint_last.pt").is_file()
                and "valid_num_updates" in found.read_text())

    runner = start(argv)
    try:  # scancel the job mid-training: the call ends in one line
        wait_for(saved, "a checkpoint", runner)
        first = (log().parent / JOB_ID).read_text().strip()
        subprocess.run(["scancel", first], check=True)
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 1 and "Traceback" not in err, err
        assert f"its Slurm job {first} was stopped (SIGTERM: scancel" in err, err
        stopped = log().read_text()
        # the same command submits it again; its runner stopped (SIGTERM), the job goes on
        runner = start(argv)
        wait_for(lambda: (log().parent / JOB_ID).is_file()
                 and (log().parent / JOB_ID).read_text().strip() != first, "a new job", runner)
        second = (log().parent / JOB_ID).read_text().strip()
        runner.terminate()
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 143 and "1 Slurm job(s) go on" in err, err
    finally:
        if runner.poll() is None:
            runner.kill()
    assert subprocess.run(["squeue", "-h", "-j", second, "-o", "%T"], capture_output=True,
                          text=True).stdout.strip() in ("PENDING", "RUNNING")
    # the next call waits for that job instead of submitting the cell a third time
    assert main(argv) == 0
    assert f"its Slurm job {second} still runs: waiting for it" in capsys.readouterr().err
    assert log().read_text().startswith(stopped) and "Loaded checkpoint" in log().read_text()
    (record,) = records(tmp_path, "run").values()
    assert [update for update, _ in record["curve"]] == list(range(2, 49, 2))


def test_a_paper_scale_dry_run_prints_one_slurm_job_per_cell_with_its_gpu(tmp_path, capsys):
    """No cluster needed: what would be submitted, and what each job asks for."""
    config = tmp_path / "slurm.json"
    config.write_text(json.dumps({"partition": "gpu", "mem_gb": 32, "time_minutes": 600}))
    assert main([TABLE, "--scale", "paper", "--executor", "slurm", "--dry-run", "--seeds", "2",
                 "--slurm-config", str(config), "--time-minutes", "2880",
                 "--work", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    cells = re.findall(r"^# (\w+), seed (\d) -> ", out, re.M)
    jobs = re.findall(r"^    \(one job: Slurm, partition gpu, 1 GPU, 1 CPU, 32 GB, 2880 min\)$",
                      out, re.M)
    assert len(cells) == len(jobs) == 10  # 5 rows, 2 seeds
    assert not (tmp_path / "work" / "jobs").exists()  # nothing submitted


def test_a_slurm_config_that_is_not_a_json_object_of_resources_is_one_line(tmp_path, capsys):
    config = tmp_path / "slurm.json"
    config.write_text(json.dumps({"partition": "gpu", "gres": "gpu:1"}))
    with pytest.raises(SystemExit) as stop:
        main([TABLE, "--scale", "paper", "--executor", "slurm", "--dry-run",
              "--slurm-config", str(config), "--work", str(tmp_path / "work")])
    assert str(stop.value).startswith(f"--slurm-config: {config} must be a JSON object")
    assert "\n" not in str(stop.value)
