"""The config strings fairseq evaluates are read as plain data: a checkpoint (or a flag value)
holding code is refused, naming the field, and the code never runs."""

from __future__ import annotations

import argparse
import ast
import sys
import warnings
from pathlib import Path

import pytest
import torch
from fairseq import options, utils
from fairseq.models import ARCH_CONFIG_REGISTRY
from omegaconf import OmegaConf

import relu_former.plugin  # noqa: F401  (installs the fix)
from relu_former.fairseq_fixes import literal_config
from relu_former.fairseq_fixes.literal_config import (
    EVALUATED_FIELDS,
    UnsafeConfigError,
    code_in_config,
    is_plain_expression,
)

from helpers import tiny_hydra_train

FAIRSEQ_ROOT = Path(utils.__file__).resolve().parent


def _code(marker: Path) -> str:
    """A string that, evaluated, creates ``marker`` and then is ``[4]``."""
    return f"__import__('pathlib').Path({str(marker)!r}).touch() or [4]"


@pytest.mark.parametrize("module", [utils, options], ids=["fairseq.utils", "fairseq.options"])
def test_each_eval_function_refuses_code(module, tmp_path):
    marker = tmp_path / "ran"
    for name, call in [("eval_str_list", lambda f: f(_code(marker), int)),
                       ("eval_str_dict", lambda f: f(_code(marker))),
                       ("eval_bool", lambda f: f(_code(marker)))]:
        with pytest.raises(UnsafeConfigError, match=r"is not a plain list.*write it as a literal"):
            call(getattr(module, name))
        assert not marker.exists(), name


def test_no_fairseq_module_keeps_an_evaluating_copy():
    """Modules that did ``from fairseq.utils import eval_bool`` hold the replacement too."""
    import fairseq.data.multilingual.multilingual_data_manager as manager
    from fairseq.dataclass import utils as dataclass_utils

    safe = {id(literal_config.eval_str_list), id(literal_config.eval_str_dict),
            id(literal_config.eval_bool),
            id(dataclass_utils.eval_str_list)}  # fairseq's own, already ast.literal_eval
    assert id(manager.eval_str_dict) in safe and id(utils.eval_bool) in safe
    holders = [(name, attr) for name, module in list(sys.modules.items())
               if name.startswith("fairseq") for attr in ("eval_str_list", "eval_str_dict",
                                                          "eval_bool")
               if hasattr(module, attr) and id(getattr(module, attr)) not in safe]
    assert not holders


def test_the_literals_fairseq_uses_still_parse():
    # the values fairseq's own flags and architectures write (transformer_lm_wiki103's
    # "20000,60000", lightconv's kernel lists, --xformers-att-config, --left-pad-source)
    assert utils.eval_str_list("[4]", int) == [4]
    assert utils.eval_str_list("(1, 2)", int) == [1, 2]
    assert options.eval_str_list("5000,20000", type=int) == [5000, 20000]
    assert utils.eval_str_list("4", int) == [4]
    assert utils.eval_str_list("[0.25, 0.5]") == [0.25, 0.5]
    assert utils.eval_str_list([3, 7], int) == [3, 7]
    assert utils.eval_str_list(None) is None
    assert utils.eval_str_dict('{"name": "scaled_dot_product"}') == {"name": "scaled_dot_product"}
    assert utils.eval_str_dict(None) is None
    assert utils.eval_bool("True") is True and utils.eval_bool("False") is False
    assert utils.eval_bool("0") is False and utils.eval_bool(None, default=True) is True


def _evaluated_fields_in_fairseq() -> set[str]:
    """The attribute names fairseq passes to eval or its eval_* helpers, read from its
    sources (fairseq/examples is left out: nothing imports it unless a user asks)."""
    helpers = {"eval", "eval_str_list", "eval_str_dict", "eval_bool"}
    found = set()
    for path in FAIRSEQ_ROOT.rglob("*.py"):
        if "examples" in path.relative_to(FAIRSEQ_ROOT).parts:
            continue
        with warnings.catch_warnings():  # invalid escapes in fairseq's strings
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_bytes())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            # editdistance.eval(a, b) compares sequences; it is not Python's eval
            if name in helpers and isinstance(node.args[0], ast.Attribute) \
                    and ast.unparse(node.func) != "editdistance.eval":
                found.add(node.args[0].attr)
    return found


def test_every_field_fairseq_evaluates_is_checked():
    found = _evaluated_fields_in_fairseq()
    # the scan sees the calls (a field passed as a local variable, like xformers_att_config,
    # is listed in EVALUATED_FIELDS by hand)
    assert {"adaptive_softmax_cutoff", "left_pad_source", "conv_feature_layers"} <= found
    assert found <= EVALUATED_FIELDS, sorted(found - EVALUATED_FIELDS)


def test_fairseq_architecture_defaults_are_plain():
    """Checkpoints of fairseq's own models (fconv's ``"[(512, 3)] * 20"``, the LSTMs'
    ``"10000,50000,200000"``) are not refused: every evaluated string an architecture sets is
    plain data."""
    checked = 0
    for arch, set_defaults in ARCH_CONFIG_REGISTRY.items():
        args = argparse.Namespace()
        try:
            set_defaults(args)
        except Exception:  # an architecture needing more than defaults (none is evaluated)
            continue
        for field, value in vars(args).items():
            if field in EVALUATED_FIELDS and isinstance(value, str):
                assert is_plain_expression(value), (arch, field, value)
                checked += 1
            # and the replaced eval_* read the ones fairseq passes to them
            if field.startswith("adaptive_") and isinstance(value, str):
                assert utils.eval_str_list(value, int) == [int(n) for n in value.split(",")]
            if field == "decoder_attention" and value in ("True", "False", "1", "0"):
                assert utils.eval_bool(value) is (value in ("True", "1"))
    assert checked > 20


def test_code_in_config_names_the_field():
    cfg = {"model": {"_name": "relu_former", "adaptive_softmax_cutoff": "[4]",
                     "encoder_layers": "[(512, 3)] * 20", "save_dir": "runs/exp (2)"}}
    assert code_in_config(cfg, "cfg") is None
    cfg["model"]["adaptive_softmax_cutoff"] = "__import__('os').getcwd() or [4]"
    assert code_in_config(OmegaConf.create(cfg), "cfg") == (
        "cfg.model.adaptive_softmax_cutoff", "__import__('os').getcwd() or [4]")
    args = argparse.Namespace(arch="fconv", decoder_attention="(lambda: 1)()")
    assert code_in_config(args, "args") == ("args.decoder_attention", "(lambda: 1)()")


@pytest.mark.slow
def test_generate_refuses_a_checkpoint_whose_config_holds_code(fairseq_run, tmp_path):
    fairseq_run.train(arch="relu_former")
    ckpt = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    state = torch.load(ckpt, map_location="cpu")  # weights_only: plain data only
    marker = tmp_path / "ran"
    assert isinstance(state["cfg"]["model"], argparse.Namespace)  # how fairseq saves it
    state["cfg"]["model"].adaptive_softmax_cutoff = _code(marker)
    torch.save(state, ckpt)

    proc = fairseq_run.generate(check=False)
    assert not marker.exists(), "the code in the checkpoint's config ran"
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-generate: error: checkpoint {ckpt} is refused: it holds "
                           "in cfg.model.adaptive_softmax_cutoff the string"), last
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--adam-betas", "--adaptive-softmax-cutoff"])
def test_train_refuses_code_in_a_flag_fairseq_evaluates(flag, fairseq_run, tmp_path):
    """A flag value (or hydra config value) holding code is refused before it runs; fairseq
    reads --adaptive-softmax-cutoff with ast.literal_eval already, argparse names it."""
    marker = tmp_path / "ran"
    proc = fairseq_run.train(flag, _code(marker), arch="relu_former", check=False)
    assert not marker.exists(), "the code in the flag ran"
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    if flag == "--adam-betas":
        assert last.startswith(f"fairseq-train: error: {flag}: the value "), last
    else:
        assert f"argument {flag}: invalid" in last, last
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_hydra_train_refuses_code_in_a_config_value(toy_data_bin, tmp_path):
    marker = tmp_path / "ran"
    proc = tiny_hydra_train(toy_data_bin, tmp_path / "ckpt",
                            f'optimizer.adam_betas="{_code(marker)}"')
    assert not marker.exists(), "the code in the config ran"
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fairseq-hydra-train: error: optimizer.adam_betas: the value "), last
    assert "Traceback" not in proc.stderr
