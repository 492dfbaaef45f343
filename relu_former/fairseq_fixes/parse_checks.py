"""Checks of the whole command line once fairseq has parsed it: what passes argparse flag by
flag and fails later or never (``--dropout nan``, ``--fp16 --cpu``, a relu-only flag without
relu attention, fairseq-validate without ``--task``). No probe: checks fairseq does not make."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from typing import Callable, Sequence

from relu_former.errors import OptionError, as_flag
from relu_former.fairseq_fixes.dictionary_check import ACCEPT_ENV, ACCEPT_FLAG
from relu_former.flag_types import non_finite_floats
from relu_former.relu_attention.config import ATTENTION_KINDS, given_activation

PRECISION_FIELDS = ("cpu", "memory_efficient_fp16", "memory_efficient_bf16", "fp16", "bf16")

# relu attention's own options (another activation never reads them), and when they are set
_RELU_ONLY = {"relu_learn_gamma": bool,
              "relu_attention_scaling": lambda value: value not in (None, "factor")}


def typed_flags(argv: Sequence[str]) -> set[str]:
    """The ``--flags`` typed on a command line (not defaults an architecture filled in)."""
    return {item.split("=", 1)[0] for item in argv if item.startswith("--")}


def check_precision(given: set[str], training: bool = False) -> None:
    """``OptionError`` for half precision with ``--cpu`` or in two formats, and (``training``)
    bfloat16 without torch_xla (TPUs only); ``given``: the typed :data:`PRECISION_FIELDS`."""
    half = [name for name in PRECISION_FIELDS[1:] if name in given]
    if "cpu" in given and half:
        shown = " and ".join(as_flag(name) for name in half)
        raise OptionError(as_flag(half[0]), f"half-precision training needs a GPU, but --cpu is "
                          f"given: drop {shown} to run in float32 on the CPU, or drop --cpu")
    formats = {name.rsplit("_", 1)[-1]: name for name in reversed(half)}
    if len(formats) > 1:
        raise OptionError(as_flag(formats["bf16"]), f"{as_flag(formats['bf16'])} and "
                          f"{as_flag(formats['fp16'])} ask for two half-precision formats: "
                          "give one of them")
    bf16 = [name for name in half if name.endswith("bf16")]
    if training and bf16 and "tpu" not in given and importlib.util.find_spec("torch_xla") is None:
        raise OptionError(as_flag(bf16[0]), f"fairseq 0.12 trains in bfloat16 on TPUs only (it "
                          f"turns {as_flag(bf16[0])} into --tpu, and torch_xla is not installed): "
                          "use --fp16 on a GPU")


def check_command_line(args: argparse.Namespace, typed: set[str] | None = None) -> None:
    """``OptionError`` for the first problem of a parsed command line (``typed``: the flags
    written, for the checks of combinations)."""
    for name, value in non_finite_floats(args):
        raise OptionError(as_flag(name), f"must be a finite number, got {value!r}")
    if typed and {"--pooling-base", "--pooling-temperature"} <= typed:
        raise OptionError(
            "--pooling-base", "--pooling-base is ignored when --pooling-temperature is given "
            "(pairs are then weighed by softmax(score / T)): give one of the two")
    activations = {given_activation(args, kind) for kind in ATTENTION_KINDS} - {None}
    if activations and "relu" not in activations:
        for name, is_set in _RELU_ONLY.items():
            value, flag = getattr(args, name, None), as_flag(name)
            if is_set(value):
                shown = flag if value is True else f"{flag} {value}"
                raise OptionError(
                    flag, f"{shown} applies to relu attention only, but every attention here "
                    f"is {', '.join(sorted(activations))} (--attention-activation and "
                    f"--{{encoder,decoder,cross}}-attention-activation): it would be ignored. "
                    f"Drop {flag} or use --attention-activation relu")


def _add_plugin_flags(parser: argparse.ArgumentParser) -> None:
    if not any(ACCEPT_FLAG in action.option_strings for action in parser._actions):
        parser.add_argument(ACCEPT_FLAG, action="store_true", help="start from a checkpoint "
                            "(--finetune-from-model, or --restore-file with --reset-optimizer) "
                            "trained with another dictionary: each word keeps its embedding row, "
                            "moved to its index here; a new word starts from a fresh row "
                            "(refused without this flag)")


def checking_command_lines(original: Callable) -> Callable:
    @functools.wraps(original)
    def parse_args_and_arch(parser, input_args=None, parse_known=False, suppress_defaults=False,
                            modify_parser=None):
        _add_plugin_flags(parser)
        argv = [str(a) for a in (sys.argv[1:] if input_args is None else input_args)]
        typed = typed_flags(argv)
        # before fairseq's parser, which rewrites these flags and then names the rewritten ones
        training = any("--max-update" in action.option_strings for action in parser._actions)
        check_precision({name for name in PRECISION_FIELDS + ("tpu",) if as_flag(name) in typed},
                        training)
        if parser.get_default("task") is None and "--task" not in typed:
            # fairseq-validate's parser has no default task: "KeyError: None"
            raise OptionError("--task", "--task is required by this command (it has no default "
                              "task): give the task the model was trained with, e.g. --task "
                              "translation")
        parsed = original(parser, input_args=input_args, parse_known=parse_known,
                          suppress_defaults=suppress_defaults, modify_parser=modify_parser)
        args = parsed[0] if parse_known else parsed
        # suppress_defaults: fairseq-validate's partial overrides, not a whole command line
        if not suppress_defaults:
            check_command_line(args, typed)
        if getattr(args, "accept_dictionary_change", False):
            # an environment variable reaches the spawned distributed workers too
            os.environ[ACCEPT_ENV] = "1"
        return parsed

    return parse_args_and_arch
