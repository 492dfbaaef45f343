"""The command-line checks for configs that no parser saw: ``fairseq-hydra-train``'s.

``fairseq-hydra-train`` never calls fairseq's parser, so ``model.dropout=nan`` trained with
dropout off and ``++common.cpu=true ++common.fp16=true`` ended in a 140-line CUDA assertion.
Both programs call ``add_defaults(cfg)`` after importing the plugin; its wrapper runs the parse
checks on the config (the model flags' types and choices, then ``check_precision`` and
``check_command_line`` on the config flattened, the architecture's defaults filled in). An
error names the config key (``model.dropout``) and, in fairseq's programs, ends in one line,
exit 2 (``HYDRA_FULL_ERROR`` lets hydra pass it to the plugin's hook). No probe: these are
checks fairseq does not make.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from typing import Any, Callable

from relu_former import flag_types
from relu_former.errors import CommandLineError, OptionError, is_fairseq_command
from relu_former.fairseq_fixes.parse_checks import (
    PRECISION_FIELDS,
    check_command_line,
    check_precision,
)
from relu_former.fairseq_fixes.wrap_once import wrap_once

_FLAG = re.compile(r"--([a-z0-9][a-z0-9-]*)")


def flatten_config(cfg: Any) -> tuple[argparse.Namespace, dict[str, str], set[str]]:
    """The config as a parsed command line: every field in one namespace (the model's
    filled in with its architecture's defaults), the group each field is set in (the model's
    first, then fairseq's order of groups) and the model fields the config sets (not None),
    spelled as flags: what a command line would have typed."""
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import OmegaConf

    groups = OmegaConf.to_container(cfg, resolve=True)
    model = groups.get("model") if isinstance(groups.get("model"), dict) else {}
    where: dict[str, str] = {}
    for group in ("model", *FairseqConfig.__dataclass_fields__):
        for name in groups[group] if isinstance(groups.get(group), dict) else ():
            if not name.startswith("_"):
                where.setdefault(name, group)
    args = argparse.Namespace(**{name: groups[group][name] for name, group in where.items()})
    arch = model.get("_name")
    if arch in ARCH_CONFIG_REGISTRY:
        args.arch = arch
        ARCH_CONFIG_REGISTRY[arch](args)  # fills only what is unset, as for a command line
    for name in vars(args):
        where.setdefault(name, "model")
    typed = {"--" + name.replace("_", "-") for name, value in model.items()
             if value is not None and not name.startswith("_")}
    return args, where, typed


def in_config_keys(message: str, where: dict[str, str]) -> str:
    """``message`` with each ``--flag`` of a config field spelled as its key (``model.x_y``)."""

    def key(match: re.Match) -> str:
        name = match.group(1).replace("-", "_")
        return f"{where[name]}.{name}" if name in where else match.group(0)

    return _FLAG.sub(key, message)


def check_model_values(model: dict) -> None:
    """What fairseq's parser checks flag by flag, on the model values a config sets: the
    plugin's argparse types (``relu_former.flag_types``) and every flag's choices."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model_class = ARCH_MODEL_REGISTRY.get(model.get("_name"))
    if model_class is None:
        return
    parser = argparse.ArgumentParser(add_help=False)
    model_class.add_args(parser)
    for action in parser._actions:
        value = model.get(action.dest)
        if value is None or not action.option_strings:
            continue
        flag = action.option_strings[0]
        if getattr(action.type, "__module__", None) == flag_types.__name__:
            try:
                action.type(str(value))
            except argparse.ArgumentTypeError as error:
                raise OptionError(flag, str(error)) from None
        if action.choices is not None and value not in action.choices:
            raise OptionError(flag, f"{value!r} is not one of "
                              f"{', '.join(map(str, action.choices))}")


def check_config(cfg: Any) -> None:
    """Raise ``OptionError``, naming the config key, for the first problem the parse checks
    find in a config built without fairseq's parser."""
    from omegaconf import OmegaConf

    args, where, typed = flatten_config(cfg)
    try:
        model = cfg.get("model")
        check_model_values(OmegaConf.to_container(model) if OmegaConf.is_config(model) else {})
        check_precision({name for name in PRECISION_FIELDS if getattr(args, name, False)})
        check_command_line(args, typed)
    except OptionError as error:
        key = in_config_keys(error.flag, where)
        raise OptionError(key, in_config_keys(str(error), where)) from None


def _from_parsed_command_line(cfg: Any) -> bool:
    return any(isinstance(cfg.get(group), argparse.Namespace) for group in cfg)


def _checking(original: Callable) -> Callable:
    @functools.wraps(original)
    def add_defaults(cfg) -> None:
        if not _from_parsed_command_line(cfg):
            if is_fairseq_command():
                # hydra prints the traceback of an error it catches itself; with this set it
                # re-raises it, and the plugin's error hook prints a CommandLineError (this
                # check's, or a later one: a refused resume, a value the model refuses) as one
                # line, any other error as Python's traceback
                os.environ.setdefault("HYDRA_FULL_ERROR", "1")
                _name_config_keys_in_errors(flatten_config(cfg)[1])
            check_config(cfg)
        return original(cfg)

    return add_defaults


# the config keys of the config being trained, by field: for the errors raised after the check
_CONFIG_KEYS: dict[str, str] = {}


def _name_config_keys_in_errors(where: dict[str, str]) -> None:
    """Spell the flags in the plugin's later errors (a refused resume, say) as the config's
    keys, before the error hook prints them."""
    _CONFIG_KEYS.clear()
    _CONFIG_KEYS.update(where)
    previous = sys.excepthook
    if getattr(previous, "_relu_former_config_keys", False):
        return

    def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        if isinstance(error, CommandLineError):
            error.args = (in_config_keys(str(error), _CONFIG_KEYS),)
        previous(kind, error, traceback)

    hook._relu_former_config_keys = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def check_hydra_configs() -> None:
    """Wrap fairseq's ``add_defaults`` once, where ``fairseq.dataclass.initialize`` defines it
    and where an imported ``fairseq_cli.train`` bound it by name (idempotent; that module is
    never imported here: it sets up logging)."""
    from fairseq.dataclass import initialize

    train = sys.modules.get("fairseq_cli.train")
    for module in (initialize, train) if train is not None else (initialize,):
        wrap_once(module, "add_defaults", _checking)
