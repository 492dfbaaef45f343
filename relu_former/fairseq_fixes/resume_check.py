"""A resume never trains a checkpoint on as another model: fairseq matches weights by name
and shape only, so a flag that changes their meaning (``--attention-activation``, ``--arch``)
went unnoticed. Refused in one line unless a new optimisation starts (``--finetune-from-model``,
``--reset-optimizer``). No probe: a check fairseq does not make."""

from __future__ import annotations

import argparse
import functools
import logging
from typing import Any

from fairseq.models import ARCH_MODEL_REGISTRY

from relu_former.errors import OptionError, as_flag
from relu_former.relu_attention import config as attention

logger = logging.getLogger(__name__)

# flags of how the model is computed or trained, not what its weights mean: regularisation,
# memory savers, kernels, length limits and blocks (which add no parameters)
SAME_MEANING = frozenset({
    "dropout", "attention_dropout", "activation_dropout", "relu_dropout",
    "adaptive_softmax_dropout", "encoder_layerdrop", "decoder_layerdrop",
    "quant_noise_pq", "quant_noise_pq_block_size", "quant_noise_scalar",
    "checkpoint_activations", "offload_activations", "min_params_to_wrap", "export",
    "encoder_xformers_att_config", "decoder_xformers_att_config", "base_shuffle",
    "encoder_embed_path", "decoder_embed_path",  # initial embeddings, replaced by the load
    "max_source_positions", "max_target_positions",
    "attention_backend", "attention_key_chunk_size", "attention_kernel", "attention_block_size",
})
# the attention activations: the shared flag and the per-kind ones, which take precedence
_ACTIVATIONS = ("attention_activation", "encoder_attention_activation",
                "decoder_attention_activation", "cross_attention_activation")


@functools.lru_cache(maxsize=None)
def meaning_fields(model_class: type) -> tuple[str, ...]:
    """The destinations of ``model_class``'s ``add_args`` flags, less :data:`SAME_MEANING`."""
    parser = argparse.ArgumentParser(add_help=False)
    model_class.add_args(parser)
    return tuple(sorted({action.dest for action in parser._actions if action.option_strings}
                        - SAME_MEANING))


def get_field(args: Any, name: str) -> Any:
    """``args.name`` of a namespace or config, ``args[name]`` of a dict; None if missing."""
    return args.get(name) if isinstance(args, dict) else getattr(args, name, None)


def _has(args: Any, name: str) -> bool:
    return name in args if isinstance(args, dict) else hasattr(args, name)


def _plain(args: Any, name: str) -> Any:
    """``name``'s value as a command line gives it: a list, a current ``--ffn-activation``."""
    value = get_field(args, name)
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return list(value)
    if name == "ffn_activation":
        return attention.LEGACY_FFN_ACTIVATIONS.get(value, value)
    return value


def _arch(args: Any) -> str | None:
    return get_field(args, "arch") or get_field(args, "_name")


def _effective_activations(args: Any) -> tuple | None:
    """The activation of each attention kind, by the model's own precedence rule."""
    values = argparse.Namespace(**{name: get_field(args, name) for name in _ACTIVATIONS})
    try:
        settings = attention.AttentionSettings.from_cfg(values)
    except ValueError:
        return None
    return tuple(settings.activation(kind) for kind in attention.ATTENTION_KINDS)


def model_differences(saved: Any, current: Any) -> list[tuple[str, Any, Any]]:
    """``(field, saved value, this run's value)`` for each meaning field that differs (an
    ``arch`` alone), of those the checkpoint holds."""
    if _arch(saved) != _arch(current):
        return [("arch", _arch(saved), _arch(current))]
    model_class = ARCH_MODEL_REGISTRY.get(_arch(current))
    if model_class is None:
        return []
    found = [(name, _plain(saved, name), _plain(current, name))
             for name in meaning_fields(model_class) if _has(saved, name)]
    found = [item for item in found if item[1] != item[2]]
    names = {name for name, _, _ in found}
    # the same activations spelled otherwise (shared or per kind) are the same model
    if names and names <= set(_ACTIVATIONS) and \
            _effective_activations(saved) == _effective_activations(current):
        return []
    if "attention_activation" in names:  # a per-kind flag left unset follows the shared one
        found = [item for item in found if item[0] not in _ACTIVATIONS[1:] or None not in item]
    return found


def _shown(value: Any) -> str:
    return "(unset)" if value is None else str(value)


def _refusal(filename: str, differences: list[tuple[str, Any, Any]]) -> OptionError:
    name, saved, given = differences[0]
    others = "".join(f"; {as_flag(n)} {_shown(s)} there, {_shown(g)} here"
                     for n, s, g in differences[1:])
    return OptionError(
        as_flag(name),
        f"{filename} was trained with {as_flag(name)} {_shown(saved)}, this run has "
        f"{_shown(given)}{others}: resuming would train it on as another model and replace "
        f"its checkpoints. To continue that run, give {as_flag(name)} {_shown(saved)}; to start "
        f"a new model from its weights, give another --save-dir and --finetune-from-model "
        f"{filename} (or --reset-optimizer to load it here anyway)")


def check_resume(trainer: Any, state: dict, filename: str, reset_optimizer: bool) -> None:
    """``OptionError`` when ``state`` (the checkpoint ``filename``) differs in meaning from
    ``trainer``'s model; with ``reset_optimizer``, a warning per change."""
    saved = get_field(state["cfg"], "model") if state.get("cfg") is not None else state.get("args")
    current = getattr(trainer.cfg, "model", None)
    differences = (model_differences(saved, current)
                   if saved is not None and current is not None else [])
    if differences and not reset_optimizer:
        raise _refusal(filename, differences)
    for name, before, after in differences:
        logger.warning(f"{filename} was trained with {as_flag(name)} {_shown(before)}: "
                       f"starting a new model with {_shown(after)} from its weights")
