"""fairseq-hydra-train's configs get the checks fairseq's parser runs on a command line:
a non-finite float, half precision with common.cpu, a relu-only setting with no relu
attention, stop the run in one line naming the config key, before anything is written."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import relu_former.plugin  # noqa: F401  (registers the architectures the configs name)
from relu_former.errors import OptionError
from relu_former.fairseq_fixes.hydra_checks import check_config

from helpers import tiny_hydra_train


@pytest.mark.slow
@pytest.mark.parametrize("overrides, message", [
    (["model.dropout=nan"], "model.dropout: must be a finite number, got nan"),
    (["++common.fp16=true"], "common.fp16: half-precision training needs a GPU, but "
     "common.cpu is given: drop common.fp16 to run in float32 on the CPU, or drop common.cpu"),
    (["++model.attention_activation=softmax", "++model.relu_learn_gamma=true"],
     "model.relu_learn_gamma applies to relu attention only"),
])
def test_hydra_train_runs_the_parse_checks(overrides, message, toy_data_bin, tmp_path):
    save = tmp_path / "ckpt"
    proc = tiny_hydra_train(toy_data_bin, save, "++checkpoint.no_save=false", *overrides)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-hydra-train: error: {message}"), last
    assert not save.exists()


@pytest.mark.slow
def test_a_later_plugin_error_is_one_line_naming_config_keys(toy_data_bin, tmp_path):
    """An error the plugin raises after the checks (here a resume as another model) ends in
    one line too, not hydra's traceback, with the flags spelled as config keys."""
    save = tmp_path / "ckpt"
    trained = tiny_hydra_train(toy_data_bin, save, "++checkpoint.no_save=false")
    assert trained.returncode == 0 and (save / "checkpoint_last.pt").is_file(), \
        (trained.stdout + trained.stderr)[-3000:]
    proc = tiny_hydra_train(toy_data_bin, save, "++checkpoint.no_save=false",
                            "++model.attention_activation=softmax", "++optimization.max_update=2")
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-hydra-train: error: model.attention_activation: "), last
    assert "another checkpoint.save_dir and checkpoint.finetune_from_model" in last, last


def test_typed_pairs_and_arch_defaults_are_read_from_the_config():
    """The model keys a config sets count as typed; the architecture fills the rest."""
    both = OmegaConf.create({"common": {"cpu": False}, "model": {
        "_name": "pyramidion_base", "pooling_base": 10.0, "pooling_temperature": 0.5}})
    with pytest.raises(OptionError, match=r"^model.pooling_base is ignored when "
                                          r"model.pooling_temperature is given") as error:
        check_config(both)
    assert error.value.flag == "model.pooling_base"
    # pyramidion's arch default is softmax attention, not written in the config
    relu_only = OmegaConf.create({"model": {"_name": "pyramidion_base",
                                            "relu_learn_gamma": True}})
    with pytest.raises(OptionError, match=r"model.relu_learn_gamma applies to relu attention"):
        check_config(relu_only)
    check_config(OmegaConf.create({"model": {"_name": "pyramidion_base",
                                             "pooling_temperature": 0.5}}))


@pytest.mark.parametrize("model, message", [
    ({"relu_gamma": 0.0}, r"^model.relu_gamma must be a finite number > 0, got 0.0"),
    ({"attention_activation": "tanh"}, r"^model.attention_activation: 'tanh' is unknown"),
    ({"pooling_base": 1.0}, r"^model.pooling_base must be > 1"),
    ({"pooling_scorer": "mlp"}, r"^model.pooling_scorer: 'mlp' is not one of"),
])
def test_model_values_get_the_flags_own_checks(model, message):
    """The checks argparse runs on each flag (its type, its choices) run on the config's
    values, naming the key."""
    with pytest.raises(OptionError, match=message):
        check_config(OmegaConf.create({"model": {"_name": "pyramidion_base", **model}}))
