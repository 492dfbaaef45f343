"""A checkpoint's config strings are data: a checkpoint whose config holds code, or a string
fairseq splits into numbers that is not such a list, is refused when it loads, naming the file
and the field; no code runs and no traceback is printed."""

from __future__ import annotations

import argparse
import ast
import re
import warnings
from pathlib import Path

import pytest
import torch
from fairseq import utils
from fairseq.models import ARCH_CONFIG_REGISTRY
from omegaconf import OmegaConf

import relu_former.plugin  # noqa: F401  (installs the check)
from relu_former.fairseq_fixes.literal_config import (
    EVALUATED_FIELDS,
    NUMBER_LIST_FIELDS,
    config_problem,
    is_plain_expression,
    number_list_pattern,
)

FAIRSEQ_ROOT = Path(utils.__file__).resolve().parent


def _code(marker: Path) -> str:
    """A string that, evaluated, creates ``marker`` and then is ``[4]``."""
    return f"__import__('pathlib').Path({str(marker)!r}).touch() or [4]"


def _fairseq_sources():
    """The syntax trees of fairseq's sources (fairseq/examples is left out: nothing imports
    it unless a user asks)."""
    for path in FAIRSEQ_ROOT.rglob("*.py"):
        if "examples" in path.relative_to(FAIRSEQ_ROOT).parts:
            continue
        with warnings.catch_warnings():  # invalid escapes in fairseq's strings
            warnings.simplefilter("ignore")
            yield ast.parse(path.read_bytes())


def _evaluated_fields_in_fairseq() -> set[str]:
    """The attribute names fairseq passes to eval or its eval_* helpers, read from its
    sources."""
    helpers = {"eval", "eval_str_list", "eval_str_dict", "eval_bool"}
    found = set()
    for tree in _fairseq_sources():
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
            if field in NUMBER_LIST_FIELDS and isinstance(value, str) and value:
                assert re.fullmatch(number_list_pattern(field), value), (arch, field, value)
    assert checked > 20


def _number_lists_in_fairseq() -> dict[str, str]:
    """The attribute names fairseq reads with ``int()``/``float()`` over ``.split(SEP)``, and
    SEP, from its sources; ``prune_state_dict`` splits ``*_layers_to_keep`` through a local
    variable, so those two are added by name."""
    found = {"encoder_layers_to_keep": ",", "decoder_layers_to_keep": ","}
    for tree in _fairseq_sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) and \
                    getattr(node.elt, "func", None) is not None and \
                    getattr(node.elt.func, "id", None) in ("int", "float"):
                for generator in node.generators:
                    split = generator.iter
                    if isinstance(split, ast.Call) and \
                            getattr(split.func, "attr", None) == "split" and \
                            isinstance(split.func.value, ast.Attribute):
                        found[split.func.value.attr] = ast.literal_eval(split.args[0])
    return found


def test_every_field_fairseq_splits_into_numbers_is_checked():
    found = _number_lists_in_fairseq()
    assert {"adp_trf_idx", "channel_weights", "early_exit"} <= set(found)
    assert set(found) <= set(NUMBER_LIST_FIELDS), sorted(set(found) - set(NUMBER_LIST_FIELDS))
    for field, separator in found.items():  # each pattern accepts what fairseq reads
        numbers = separator.join(["0", "2"] if separator else ["3"])
        assert NUMBER_LIST_FIELDS[field][1] == separator, field
        assert re.fullmatch(number_list_pattern(field), numbers), (field, numbers)


def test_config_problem_names_the_field():
    cfg = {"model": {"_name": "relu_former", "adaptive_softmax_cutoff": "[4]",
                     "encoder_layers": "[(512, 3)] * 20", "save_dir": "runs/exp (2)",
                     "encoder_layers_to_keep": "0, 2", "decoder_layers_to_keep": None}}
    assert config_problem(cfg, "cfg") is None
    cfg["model"]["adaptive_softmax_cutoff"] = "__import__('os').getcwd() or [4]"
    assert config_problem(OmegaConf.create(cfg), "cfg")[:2] == (
        "cfg.model.adaptive_softmax_cutoff", "__import__('os').getcwd() or [4]")
    args = argparse.Namespace(arch="fconv", decoder_attention="(lambda: 1)()")
    assert config_problem(args, "args")[:2] == ("args.decoder_attention", "(lambda: 1)()")
    for text in ("__import__('os').getcwd()", "1;2", "0,x", "[0, 2]", "0,,2"):
        args = argparse.Namespace(arch="transformer", encoder_layers_to_keep=text)
        assert config_problem(args, "args") == (
            "args.encoder_layers_to_keep", text,
            "a list of numbers (fairseq splits it)"), text


@pytest.mark.slow
def test_generate_refuses_a_checkpoint_whose_config_holds_code(fairseq_run, tmp_path):
    fairseq_run.train(arch="relu_former")
    ckpt = fairseq_run.work / "checkpoints" / "checkpoint_last.pt"
    original = ckpt.read_bytes()
    marker = tmp_path / "ran"
    # fairseq evaluates the first, and int()s the split of the other two (a ValueError
    # traceback in prune_state_dict before)
    for field, text in [("adaptive_softmax_cutoff", _code(marker)),
                        ("encoder_layers_to_keep", _code(marker)),
                        ("decoder_layers_to_keep", "0,one")]:
        ckpt.write_bytes(original)
        state = torch.load(ckpt, map_location="cpu")  # weights_only: plain data only
        assert isinstance(state["cfg"]["model"], argparse.Namespace)  # as fairseq saves it
        setattr(state["cfg"]["model"], field, text)
        torch.save(state, ckpt)
        proc = fairseq_run.generate(check=False)
        assert not marker.exists(), "the code in the checkpoint's config ran"
        assert proc.returncode == 1, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"fairseq-generate: error: checkpoint {ckpt} is refused: its "
                               f"config holds in cfg.model.{field} the string"), last
        assert "Traceback" not in proc.stderr
