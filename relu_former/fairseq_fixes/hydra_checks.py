"""The command-line checks for ``fairseq-hydra-train``'s configs, which no parser sees
(``model.dropout=nan`` trained with dropout off): the wrapper of ``add_defaults`` runs
``parse_checks`` on the config, flattened, naming the config key. No probe: checks fairseq does
not make."""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from typing import Any, Callable

from fairseq.dataclass import initialize
from fairseq.dataclass.configs import FairseqConfig
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from omegaconf import OmegaConf

from relu_former import errors, flag_types
from relu_former.errors import OptionError
from relu_former.fairseq_fixes import parse_checks, wrap_once


def flatten_config(cfg: Any) -> tuple[argparse.Namespace, dict[str, str], set[str]]:
    """The config as a command line: one namespace (with the architecture's defaults), each
    field's group (the model's first), and the model fields set, as typed flags."""
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
    typed = {errors.as_flag(name) for name, value in model.items()
             if value is not None and not name.startswith("_")}
    return args, where, typed


_FLAG = re.compile(r"--([a-z0-9][a-z0-9-]*)")


def in_config_keys(message: str, where: dict[str, str]) -> str:
    """``message`` with each ``--flag`` of a config field spelled as its key (``model.x_y``)."""

    def key(match: re.Match) -> str:
        name = match.group(1).replace("-", "_")
        return f"{where[name]}.{name}" if name in where else match.group(0)

    return _FLAG.sub(key, message)


def check_model_values(model: dict) -> None:
    """What the parser checks per flag, on a config's model values: the plugin's argparse
    types (``flag_types``) and every flag's choices."""
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
    """``OptionError`` naming the config key for the first problem the parse checks find."""
    args, where, typed = flatten_config(cfg)
    try:
        model = cfg.get("model")
        check_model_values(OmegaConf.to_container(model) if OmegaConf.is_config(model) else {})
        parse_checks.check_precision({name for name in parse_checks.PRECISION_FIELDS
                                      if getattr(args, name, False)})
        parse_checks.check_command_line(args, typed)
    except OptionError as error:
        key = in_config_keys(error.flag, where)
        raise OptionError(key, in_config_keys(str(error), where)) from None


def _checking(original: Callable) -> Callable:
    @functools.wraps(original)
    def add_defaults(cfg) -> None:
        # a config no parser saw (a parsed command line holds namespaces)
        if not any(isinstance(cfg.get(group), argparse.Namespace) for group in cfg):
            if errors.is_fairseq_command():
                # hydra re-raises for the error hook: one line, naming config keys
                os.environ.setdefault("HYDRA_FULL_ERROR", "1")
                _name_config_keys_in_errors(flatten_config(cfg)[1])
            check_config(cfg)
        return original(cfg)

    return add_defaults


def _name_config_keys_in_errors(where: dict[str, str]) -> None:
    """Spell the flags of later errors (a refused resume) as config keys, for whichever hook
    prints them (the plugin's; a test runner's)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        if isinstance(error, errors.CommandLineError):
            error.args = (in_config_keys(str(error), where),)
        previous(kind, error, traceback)

    sys.excepthook = hook


def check_hydra_configs() -> None:
    """Wrap ``add_defaults`` where defined and where ``fairseq_cli.train`` bound it, if loaded."""
    for module in filter(None, (initialize, sys.modules.get("fairseq_cli.train"))):
        wrap_once(module, "add_defaults", _checking)
