"""Config strings that fairseq evaluates are read as plain data, never run as code.

fairseq 0.12 turns some string options into values with Python's ``eval``:
``fairseq.utils.eval_str_list`` (``adaptive_softmax_cutoff``, ``adaptive_input_cutoff``, the
``pipeline_*`` lists), ``eval_str_dict`` (``xformers_att_config``, the multilingual
``--langtoks``-style options) and ``eval_bool`` (``left_pad_source`` of the multilingual
tasks), and some models, optimizers and criteria call ``eval`` on a field themselves
(``fconv``'s ``encoder_layers``, ``wav2vec``'s ``conv_feature_layers``, ``adam_betas``, ...).
fairseq-generate builds the model from the config saved *in the checkpoint*, so a checkpoint
holding nothing but plain data (all the safe ``weights_only`` loader lets through) could run
any code: ``cfg.model.adaptive_softmax_cutoff = "__import__('os').system(...) or [4]"``.

Three fixes, installed by :func:`read_config_strings_as_literals` when fairseq loads the
plugin:

- the three ``eval_*`` functions are replaced, in ``fairseq.utils`` and in every fairseq
  module that imported them by name, by ones that read a string with ``ast.literal_eval``
  (lists, tuples, dicts, numbers, strings, booleans, None: every value fairseq's own
  architectures and flags use) and refuse anything else with ``UnsafeConfigError``;
- every checkpoint is checked when it is loaded: a field fairseq evaluates
  (:data:`EVALUATED_FIELDS`) that holds a string other than a literal, or literals joined
  by ``+``, ``-`` and ``*`` (what ``fconv``'s ``"[(512, 3)] * 20"`` needs), refuses the
  checkpoint with ``UnsafeCheckpointError``, naming the file and the field, before fairseq
  builds anything from it;
- the same check runs on the config of every model, optimizer and criterion fairseq builds
  (``models.build_model``, ``optim.build_optimizer``, ``criterions.build_criterion``), so a
  hydra config or command line holding code there is refused with ``UnsafeConfigError``,
  naming the field.

Left as they are: ``--model-overrides``, which ``fairseq-validate`` and ``fairseq-eval-lm``
``eval`` in their own ``main`` before anything is built.
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from typing import Any, Callable, Iterator

from relu_former.errors import CommandLineError, UnsafeCheckpointError
from relu_former.fairseq_fixes.wrap_once import wrap_once

# The fields that fairseq 0.12 (outside fairseq/examples) passes to eval, eval_str_list,
# eval_str_dict or eval_bool; a test reads fairseq's sources and checks that none is missing.
EVALUATED_FIELDS = frozenset({
    "adafactor_eps", "adam_betas", "adamax_betas", "adaptive_input_cutoff",
    "adaptive_softmax_cutoff", "character_filters", "conv_aggregator_layers",
    "conv_feature_layers", "decoder_attention", "decoder_layers", "downsample",
    "encoder_attention", "encoder_layers", "feature_encoder_spec", "gated_attention",
    "lamb_betas", "left_pad_source", "left_pad_target", "model_overrides",
    "override_encoder_layers", "pipeline_balance",
    "pipeline_decoder_balance", "pipeline_decoder_devices", "pipeline_devices",
    "pipeline_encoder_balance", "pipeline_encoder_devices", "pretrained", "project_input",
    "self_attention", "wer_args", "xformers_att_config",
})  # fmt: skip

# Literal nodes, and the arithmetic on them that fairseq's architectures write in strings.
_PLAIN_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict,
                ast.Load, ast.UnaryOp, ast.UAdd, ast.USub, ast.BinOp, ast.Add, ast.Sub,
                ast.Mult)
_SHOWN = 80  # characters of a refused string quoted in a message


def shortened(text: str) -> str:
    """``repr(text)``, cut to a length a one-line message can hold."""
    shown = repr(text)
    return shown if len(shown) <= _SHOWN else shown[:_SHOWN - 4] + "...'"


class UnsafeConfigError(CommandLineError):
    """A config string fairseq would evaluate that is not a plain literal; the message names
    the field when it is known."""

    exit_status = 2  # a bad flag or config value, as argparse's

    def __init__(self, text: str, field: str | None = None) -> None:
        self.text, self.field = text, field
        named = f"{field}: the value" if field else "the config value"
        super().__init__(
            f"{named} {shortened(text)} is not a plain list, tuple, dict, number, bool or "
            "None, and fairseq would run it as code: write it as a literal, such as [4] or "
            "(0.9, 0.98)")


def literal(text: str) -> Any:
    """The Python literal ``text`` spells (``"[4]"``, ``"5000,20000"``, ``"{'a': 1}"``,
    ``"True"``); anything else raises ``UnsafeConfigError``."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise UnsafeConfigError(text) from None


def eval_str_list(x, type=float):  # noqa: A002  (fairseq's signature)
    """fairseq's ``eval_str_list``, reading the string as a literal."""
    if x is None:
        return None
    if isinstance(x, str):
        x = literal(x)
    try:
        return list(map(type, x))
    except TypeError:
        return [type(x)]


def eval_str_dict(x, type=dict):  # noqa: A002  (fairseq's signature)
    """fairseq's ``eval_str_dict``, reading the string as a literal."""
    if isinstance(x, str):
        return literal(x)
    return x


def eval_bool(x, default: bool = False) -> bool:
    """fairseq's ``eval_bool``, reading the string as a literal. As in fairseq, anything but
    a string (``eval`` raised TypeError on it) gives ``default``."""
    if not isinstance(x, str):
        return default
    return bool(literal(x))


_REPLACEMENTS = {"eval_str_list": eval_str_list, "eval_str_dict": eval_str_dict,
                 "eval_bool": eval_bool}


def is_plain_expression(text: str) -> bool:
    """Whether ``eval(text)`` can only build data: literals, and ``+``, ``-``, ``*`` on them."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True  # eval would fail to parse it as well: nothing can run
    return all(isinstance(node, _PLAIN_NODES) for node in ast.walk(tree))


def _string_fields(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every (dotted name, string) pair under ``value``, a container of plain data."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _string_fields(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _string_fields(item, f"{where}[{index}]")
    elif isinstance(value, str):
        yield where, value


def code_in_config(config: Any, where: str) -> tuple[str, str] | None:
    """The first field under ``config`` (a config, namespace or dict called ``where``) that
    fairseq evaluates and that holds a string that is not plain data, as (dotted name,
    string); None when there is none."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(config):
        config = OmegaConf.to_container(config, resolve=False)
    for name, text in _string_fields(config, where):
        if name.rsplit(".", 1)[-1] in EVALUATED_FIELDS and not is_plain_expression(text):
            return name, text
    return None


def checkpoint_config_problem(state: Any) -> str | None:
    """What is wrong with the config strings of a loaded checkpoint ``state``, or None."""
    if not isinstance(state, dict):
        return None
    found = code_in_config(state.get("cfg"), "cfg") or code_in_config(state.get("args"), "args")
    if found is None:
        return None
    where, text = found
    return (f"in {where} the string {shortened(text)}, an expression fairseq would evaluate "
            "that is not a plain list, dict, number or bool")


def _refusing_code_in_config(original: Callable) -> Callable:
    """``load_checkpoint_to_cpu`` that refuses a checkpoint whose config holds code."""

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        state = original(path, arg_overrides=arg_overrides,
                         load_on_all_ranks=load_on_all_ranks)
        found = code_in_config(state.get("cfg"), "cfg") or code_in_config(state.get("args"),
                                                                         "args")
        if found is not None:
            where, text = found
            raise UnsafeCheckpointError(
                str(path), f"in {where} the string {shortened(text)}, an expression fairseq "
                           "would evaluate that is not a plain list, dict, number or bool")
        return state

    return load_checkpoint_to_cpu


def _refusing_code_in(group: str) -> Callable[[Callable], Callable]:
    """A wrapper of fairseq's ``build_<group>(cfg, ...)`` that refuses code in ``cfg``."""

    def wrapper(original: Callable) -> Callable:
        @functools.wraps(original)
        def build(cfg, *args, **kwargs):
            found = code_in_config(cfg, group)
            if found is not None:
                where, text = found
                if isinstance(cfg, argparse.Namespace):  # parsed flags: name the flag
                    where = "--" + where.rsplit(".", 1)[-1].replace("_", "-")
                raise UnsafeConfigError(text, where)
            return original(cfg, *args, **kwargs)

        return build

    return wrapper


# made once, so that wrap_once recognises them when the plugin is loaded again
_BUILDERS = {("models", "build_model"): _refusing_code_in("model"),
             ("optim", "build_optimizer"): _refusing_code_in("optimizer"),
             ("criterions", "build_criterion"): _refusing_code_in("criterion")}


def read_config_strings_as_literals() -> None:
    """Install the fixes (idempotent)."""
    import importlib

    from fairseq import checkpoint_utils, utils

    for name, replacement in _REPLACEMENTS.items():
        original = getattr(utils, name)
        if original is replacement:
            continue
        # `from fairseq.utils import eval_bool` (fairseq.options, ...) holds its own reference
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("fairseq") \
                    and getattr(module, name, None) is original:
                setattr(module, name, replacement)
    wrap_once(checkpoint_utils, "load_checkpoint_to_cpu", _refusing_code_in_config)
    for (package, name), wrapper in _BUILDERS.items():
        wrap_once(importlib.import_module(f"fairseq.{package}"), name, wrapper)
