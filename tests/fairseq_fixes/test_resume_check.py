"""Resuming with flags that change what the saved weights mean is refused, naming the flag,
both values and the fixes, and leaves the save dir's checkpoints as they were; a change of
how the model is computed or trained resumes; --reset-optimizer and --finetune-from-model
start a new model from the weights, with a warning."""

from __future__ import annotations

import argparse
import hashlib

import pytest

import relu_former.plugin  # noqa: F401  (registers the models compared below)
from relu_former.fairseq_fixes.resume_check import (
    SAME_MEANING,
    meaning_fields,
    model_differences,
)
from relu_former.pyramidion.model import PyramidionModel
from relu_former.relu_attention.model import ReLUFormerModel, relu_former_architecture

from helpers import FairseqRun, loaded_updates


def _digests(folder) -> dict:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.glob("checkpoint*.pt"))}


@pytest.mark.slow
def test_a_resume_that_changes_what_the_weights_mean_is_refused(fairseq_run: FairseqRun):
    fairseq_run.train(arch="relu_former")
    save = fairseq_run.work / "checkpoints"
    before = _digests(save)
    assert {"checkpoint_last.pt", "checkpoint_best.pt"} <= set(before)
    for arch, flags, flag, saved, given in [
        ("relu_former", ["--attention-activation", "softmax"], "--attention-activation", "relu",
         "softmax"),
        ("transformer", [], "--arch", "relu_former", "transformer"),  # the same sizes
    ]:
        refused = fairseq_run.train(*flags, "--max-update", "7", arch=arch, check=False)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert "Traceback" not in refused.stderr
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith(f"fairseq-train: error: {flag}: {save / 'checkpoint_last.pt'} "
                               f"was trained with {flag} {saved}, this run has {given}: "), last
        assert "--finetune-from-model" in last and "--reset-optimizer" in last, last
        assert _digests(save) == before, flags  # nothing trained on, nothing replaced

    # how it is computed or trained, and the same activation spelled per kind: resumed
    same = fairseq_run.train("--dropout", "0.2", "--attention-backend", "reference",
                             *[item for kind in ("encoder", "decoder", "cross")
                               for item in (f"--{kind}-attention-activation", "relu")],
                             "--max-update", "7", arch="relu_former")
    assert loaded_updates(same.stdout + same.stderr) == 6

    # a new model from the weights, asked for (the second replaces the relu checkpoints)
    for flags, save_dir in ((["--finetune-from-model", str(save / "checkpoint_last.pt")],
                             "tuned"), (["--reset-optimizer"], "checkpoints")):
        new = fairseq_run.train("--attention-activation", "softmax", *flags, "--max-update", "1",
                                arch="relu_former", save_dir=save_dir)
        log = new.stdout + new.stderr
        assert "was trained with --attention-activation relu: starting a new model with " \
               "softmax from its weights" in log, log[-3000:]


def _relu_former_args(**values) -> argparse.Namespace:
    args = argparse.Namespace(arch="relu_former", **values)
    relu_former_architecture(args)
    return args


def test_every_model_flag_is_compared_unless_it_keeps_the_meaning():
    fields = meaning_fields(PyramidionModel)
    assert {"attention_activation", "cross_attention_activation", "ffn_activation",
            "relu_attention_scaling", "relu_gamma", "pooling_schedule", "pooling_scorer",
            "pooling_base", "encoder_layers", "activation_fn"} <= set(fields)
    assert not SAME_MEANING & set(fields)

    class WithANewFlag(ReLUFormerModel):
        @classmethod
        def add_args(cls, parser):
            super().add_args(parser)
            parser.add_argument("--new-setting", type=int)

    assert "new_setting" in meaning_fields(WithANewFlag)


def test_differences_by_the_model_not_by_spelling():
    pooled = dict(arch="pyramidion_base", pooling_scorer="linear", attention_block_size=512)
    assert model_differences(argparse.Namespace(**pooled),
                             argparse.Namespace(**{**pooled, "pooling_scorer": "norm"})) == \
        [("pooling_scorer", "linear", "norm")]
    # blocks add no parameters: another block size is the same model
    assert model_differences(argparse.Namespace(**pooled),
                             argparse.Namespace(**{**pooled, "attention_block_size": 0})) == []
    # the deprecated --ffn-activation relu is stock; a field an old checkpoint lacks is skipped
    old = _relu_former_args()
    old.ffn_activation = "relu"
    del old.relu_attention_scaling
    assert model_differences(old, _relu_former_args(relu_attention_scaling="none")) == []
    # the saved config of a hydra run is a dict named by _name
    saved = {**vars(_relu_former_args()), "_name": "relu_former"}
    del saved["arch"]
    assert model_differences(saved, _relu_former_args(attention_activation="softmax"))[0] == \
        ("attention_activation", "relu", "softmax")
