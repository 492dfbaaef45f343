"""A checkpoint's config strings are data: checked when it loads, so no code in them runs.

fairseq-generate builds the model from the config saved *in the checkpoint*, and fairseq 0.12
turns some of its strings into values with Python's ``eval`` (``eval_str_list``:
``adaptive_softmax_cutoff``; ``eval_str_dict``: ``xformers_att_config``; ``eval_bool``:
``left_pad_source``; ``eval`` itself: ``fconv``'s ``encoder_layers``, ``adam_betas``, ...),
others with ``int()``/``float()`` over a split (``encoder_layers_to_keep``,
``decoder_layers_to_keep``: ``"0,2"``). A checkpoint holding nothing but plain data (all the
safe ``weights_only`` loader lets through) could so run code, or end in a ``ValueError``
traceback far from the file. :func:`config_problem` finds the first such field that is not the
literal fairseq expects; the checkpoint loader (``checkpoint_loading``) refuses the file in
one line naming the field, before fairseq reads it. ``average_checkpoints`` runs the same
check on each of its inputs.

Command lines and hydra configs are not checked: their author runs them, and could run any
code anyway. Left as fairseq has it: ``--model-overrides`` of ``fairseq-validate`` and
``fairseq-eval-lm``. No probe: a check fairseq does not make; a plain config loads unchanged.
"""

from __future__ import annotations

import argparse
import ast
import re
from typing import Any, Iterator

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

_NUMBER = {int: r"\s*[+-]?\d+\s*", float: r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*"}
# The fields fairseq reads with int() or float() over a split, and the separator (a test reads
# fairseq's sources for the int()/float() comprehensions over a split).
NUMBER_LIST_FIELDS = {
    "encoder_layers_to_keep": (int, ","),  # "0,2", as fairseq's prune_state_dict reads it
    "decoder_layers_to_keep": (int, ","),
    "early_exit": (int, ","),
    "conv_kernel_sizes": (int, ","),
    "adp_trf_idx": (int, ":"),  # or "all"
    "channel_weights": (float, ","),
    "loss_weights": (float, ";"),
    "multi_corpus_sampling_weights": (float, ","),
}


def number_list_pattern(field: str) -> str:
    """The regular expression a value of ``field`` (of :data:`NUMBER_LIST_FIELDS`) matches."""
    kind, separator = NUMBER_LIST_FIELDS[field]
    number = _NUMBER[kind]
    return ("all|" if field == "adp_trf_idx" else "") + f"{number}({re.escape(separator)}{number})*"


# Literal nodes, and the arithmetic on them that fairseq's architectures write in strings.
_PLAIN_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict,
                ast.Load, ast.UnaryOp, ast.UAdd, ast.USub, ast.BinOp, ast.Add, ast.Sub,
                ast.Mult)
_SHOWN = 80  # characters of a refused string quoted in a message


def shortened(text: str) -> str:
    """``repr(text)``, cut to a length a one-line message can hold."""
    shown = repr(text)
    return shown if len(shown) <= _SHOWN else shown[:_SHOWN - 4] + "...'"


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
    """The first field under ``config`` (a config, namespace or dict called ``where``) that
    fairseq parses and that does not hold what it expects, as (dotted name, string, what it
    should be); None when every such field is plain data."""
    resolved = _resolved(config)
    for name, text in _string_fields(config if resolved is None else resolved, where):
        field = name.rsplit(".", 1)[-1]
        if field not in EVALUATED_FIELDS and field not in NUMBER_LIST_FIELDS:
            continue
        if resolved is None and "${" in text:
            # fairseq resolves an interpolation when it reads the field, then parses what it
            # finds: one that cannot be resolved here cannot be checked
            return name, text, "plain data (an interpolation that does not resolve)"
        if field in EVALUATED_FIELDS and not is_plain_expression(text):
            return name, text, "a plain list, dict, number or bool (fairseq evaluates it)"
        if field in NUMBER_LIST_FIELDS and text and \
                not re.fullmatch(number_list_pattern(field), text):
            return name, text, "a list of numbers (fairseq splits it)"
    return None


def _resolved(config: Any) -> Any:
    """``config`` as plain data with its OmegaConf interpolations (``${model.x}``) resolved,
    as fairseq reads it, or None where they do not resolve. Code can hide behind an
    interpolation in a field fairseq never reads, so the resolved values are the ones checked."""
    from omegaconf import OmegaConf

    try:
        if not OmegaConf.is_config(config):
            if not isinstance(config, dict):
                return config
            config = OmegaConf.create(config, flags={"allow_objects": True})
        return OmegaConf.to_container(config, resolve=True)
    except Exception:  # any resolution failure: omegaconf raises several kinds
        return None


def checkpoint_config_problem(state: Any) -> str | None:
    """What is wrong with the config strings of a loaded checkpoint ``state``, or None."""
    if not isinstance(state, dict):
        return None
    found = config_problem(state.get("cfg"), "cfg") or config_problem(state.get("args"), "args")
    if found is None:
        return None
    where, text, expected = found
    return f"in {where} the string {shortened(text)}, which is not {expected}"


def code_in_config(config: Any, where: str) -> tuple[str, str] | None:
    """(dotted name, string) of the first field :func:`config_problem` finds, or None: the
    loader's rule for a caller that reports the field itself (``average_checkpoints``)."""
    found = config_problem(config, where)
    return None if found is None else found[:2]
