"""``python -m relu_former.average_checkpoints``: the element-wise mean of real checkpoints,
loaded safely, written whole, and decodable by fairseq-generate."""

from __future__ import annotations

import sys

import pytest
import torch

from helpers import REPO_ROOT, assert_generation_output, fairseq_command, run_command

AVERAGE = [sys.executable, "-m", "relu_former.average_checkpoints"]


def test_help_names_the_flags():
    out = run_command([*AVERAGE, "--help"], cwd=REPO_ROOT).stdout
    assert "--inputs" in out and "--output" in out and "weights_only" in out


@pytest.mark.slow
def test_average_of_two_checkpoints_is_their_mean_and_decodes(fairseq_run):
    import relu_former.plugin  # noqa: F401  (torch.load below with the plugin's allowlist)

    fairseq_run.train("--max-update", "8", "--save-interval-updates", "4",
                      "--validate-interval-updates", "4", arch="relu_former")
    save = fairseq_run.work / "checkpoints"
    inputs = [save / "checkpoint_1_4.pt", save / "checkpoint_last.pt"]
    output = fairseq_run.work / "average.pt"
    proc = run_command([*AVERAGE, "--inputs", *inputs, "--output", output], cwd=REPO_ROOT)
    assert proc.stdout.strip() == f"averaged 2 checkpoints into {output}"
    first, second, average = (torch.load(path)["model"] for path in (*inputs, output))
    assert set(average) == set(first)
    assert any(not torch.equal(first[name], second[name]) for name in first)
    for name, got in average.items():
        assert got.dtype == first[name].dtype, name
        want = ((first[name].double() + second[name].double()) / 2).to(got.dtype)
        assert torch.equal(got, want), name
    decoded = run_command([
        fairseq_command("fairseq-generate"), fairseq_run.data_bin, "--user-dir",
        fairseq_run.user_dir, "--path", output, "--gen-subset", "test", "--beam", "2",
        "--max-tokens", "1000", "--cpu", "--num-workers", "0"], cwd=fairseq_run.work)
    assert_generation_output(decoded.stdout)

    # a damaged input is named in one line and nothing is written
    damaged = fairseq_run.work / "damaged.pt"
    damaged.write_bytes(inputs[1].read_bytes()[:5000])
    missing = fairseq_run.work / "never.pt"
    proc = run_command([*AVERAGE, "--inputs", inputs[0], damaged, "--output", missing],
                       cwd=REPO_ROOT, check=False)
    assert proc.returncode == 1 and not missing.exists()
    assert proc.stderr.splitlines() == [
        f"python -m relu_former.average_checkpoints: error: checkpoint {damaged} is corrupt: "
        "it is truncated (5000 bytes, the end of the archive is missing): it was probably cut "
        "short while being written"]
    # an input is never the output
    before = inputs[0].read_bytes()
    proc = run_command([*AVERAGE, "--inputs", *inputs, "--output", inputs[0]], cwd=REPO_ROOT,
                       check=False)
    assert proc.returncode == 2 and "is one of the --inputs" in proc.stderr.splitlines()[-1]
    assert inputs[0].read_bytes() == before
