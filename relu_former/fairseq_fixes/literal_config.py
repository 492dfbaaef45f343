"""A checkpoint's config strings are data: fairseq ``eval``s some (:data:`EVALUATED_FIELDS`)
and splits others into numbers (:data:`NUMBER_LIST_FIELDS`) when it builds the model from a
checkpoint, so plain data could run code. :func:`config_problem` finds the first field that is
not the literal fairseq expects. No probe: a check fairseq does not make (docs/reliability.md)."""

from __future__ import annotations

import argparse
import ast
import re
from typing import Any, Iterator

# passed to eval or eval_str_list/dict/bool by fairseq outside examples/ (a test reads them)
EVALUATED_FIELDS = frozenset({
    "adafactor_eps", "adam_betas", "adamax_betas", "adaptive_input_cutoff",
    "adaptive_softmax_cutoff", "character_filters", "conv_aggregator_layers",
    "conv_feature_layers", "decoder_attention", "decoder_layers", "downsample",
    "encoder_attention", "encoder_layers", "feature_encoder_spec", "gated_attention",
    "lamb_betas", "left_pad_source", "left_pad_target", "model_overrides",
    "override_encoder_layers", "pipeline_balance", "pipeline_decoder_balance",
    "pipeline_decoder_devices", "pipeline_devices", "pipeline_encoder_balance",
    "pipeline_encoder_devices", "pretrained", "project_input", "self_attention", "wer_args",
    "xformers_att_config",
})  # fmt: skip

_NUMBER = {int: r"\s*[+-]?\d+\s*", float: r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*"}
# read with int() or float() over a split, and the separator (a test reads fairseq's sources)
NUMBER_LIST_FIELDS = {  # "0,2", as fairseq's prune_state_dict reads *_layers_to_keep
    "encoder_layers_to_keep": (int, ","), "decoder_layers_to_keep": (int, ","),
    "early_exit": (int, ","), "conv_kernel_sizes": (int, ","), "adp_trf_idx": (int, ":"),
    "channel_weights": (float, ","), "loss_weights": (float, ";"),
    "multi_corpus_sampling_weights": (float, ","),
}  # fmt: skip


def number_list_pattern(field: str) -> str:
    """The regular expression a value of ``field`` matches."""
    kind, separator = NUMBER_LIST_FIELDS[field]
    number = _NUMBER[kind]
    return ("all|" if field == "adp_trf_idx" else "") + f"{number}({re.escape(separator)}{number})*"


# literals, and the arithmetic on them that fairseq's architectures write in strings
_PLAIN_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict,
                ast.Load, ast.UnaryOp, ast.UAdd, ast.USub, ast.BinOp, ast.Add, ast.Sub,
                ast.Mult)


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


def config_problem(config: Any, where: str) -> tuple[str, str, str] | None:
    """(dotted name, string, what it should be) of the first field under ``config`` (called
    ``where``) that fairseq parses and that is not what it expects; None if none."""
    resolved = _resolved(config)
    for name, text in _string_fields(config if resolved is None else resolved, where):
        field = name.rsplit(".", 1)[-1]
        if field not in EVALUATED_FIELDS and field not in NUMBER_LIST_FIELDS:
            continue
        if resolved is None and "${" in text:  # fairseq would parse what it resolves to
            return name, text, "plain data (an interpolation that does not resolve)"
        if field in EVALUATED_FIELDS and not is_plain_expression(text):
            return name, text, "a plain list, dict, number or bool (fairseq evaluates it)"
        if field in NUMBER_LIST_FIELDS and text and \
                not re.fullmatch(number_list_pattern(field), text):
            return name, text, "a list of numbers (fairseq splits it)"
    return None


def _resolved(config: Any) -> Any:
    """``config`` as fairseq reads it, ``${...}`` resolved (code can hide behind one), or None."""
    from omegaconf import OmegaConf

    try:
        if isinstance(config, dict):
            config = OmegaConf.create(config, flags={"allow_objects": True})
        return OmegaConf.to_container(config, resolve=True) if OmegaConf.is_config(config) \
            else config
    except Exception:  # omegaconf raises several kinds
        return None


def checkpoint_config_problem(state: Any) -> str | None:
    """What is wrong with the config strings of a loaded checkpoint ``state``, or None."""
    found = isinstance(state, dict) and (config_problem(state.get("cfg"), "cfg")
                                         or config_problem(state.get("args"), "args"))
    if not found:
        return None
    where, text, expected = found
    shown = repr(text) if len(repr(text)) <= 80 else repr(text)[:76] + "...'"  # one line
    return f"in {where} the string {shown}, which is not {expected}"
