"""A checkpoint's config string that reaches code only through an OmegaConf interpolation
(``adaptive_softmax_cutoff: ${model.hidden}``, the code in ``hidden``, a field fairseq never
reads) is refused like the code itself: fairseq resolves the interpolation when it reads the
field, then evaluates what it finds."""

from __future__ import annotations

import argparse

import pytest
import torch

import relu_former.plugin  # noqa: F401  (the allowlist of torch.load)


@pytest.mark.slow
def test_code_behind_an_interpolation_never_runs(fairseq_run, tmp_path):
    fairseq_run.train("--max-update", "2", "--save-interval-updates", "2",
                      "--validate-interval-updates", "2", arch="relu_former")
    ckpt = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    state = torch.load(ckpt, map_location="cpu")
    marker = tmp_path / "ran"
    model = state["cfg"]["model"]
    assert isinstance(model, argparse.Namespace)
    # as fairseq-hydra-train saves it: a dict, which OmegaConf resolves interpolations in
    state["cfg"]["model"] = dict(vars(model), _name=model.arch,
                                 adaptive_softmax_cutoff="${model.hidden}",
                                 hidden=f"__import__('pathlib').Path({str(marker)!r}).touch() "
                                        "or [4]")
    torch.save(state, ckpt)

    proc = fairseq_run.generate(check=False)
    assert not marker.exists(), "the code behind the interpolation ran"
    assert proc.returncode in (1, 2), proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("fairseq-generate: error: ")
    assert "Traceback" not in proc.stderr
