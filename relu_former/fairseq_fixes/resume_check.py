"""A resume never trains a checkpoint on as another model.

fairseq matches a checkpoint to a model by parameter names and shapes only, so resuming with a
flag that changes what the weights mean but not their shapes (another
``--attention-activation``, ``--relu-gamma``, ``--arch transformer`` on a ``relu_former`` run
of the same sizes) trained the weights on as another model and replaced its checkpoints.
:func:`check_resume` (run by ``checkpoint_loading`` before ``Trainer.load_checkpoint``)
compares ``--arch`` and every flag of the model class's ``add_args`` except
:data:`SAME_MEANING` (how the model is computed, not what its weights mean); a difference is
refused in one line naming the flag, both values and the fixes. ``--finetune-from-model`` or
``--reset-optimizer`` (a new optimisation) load it, with a warning per change. No probe: a
check fairseq does not make; a resume with the same flags loads unchanged.
"""

from __future__ import annotations

import argparse
import functools
import logging
from typing import Any

from relu_former.errors import OptionError

logger = logging.getLogger(__name__)

# model flags that change how the model is computed or trained, not what its weights mean:
# regularisation, memory savers, kernels, length limits and blocks (attention within blocks
# adds no parameters: a pyramidion checkpoint keeps working with another block size)
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
    """The model arguments that say what the weights of ``model_class`` mean: the
    destinations of its ``add_args`` flags, less :data:`SAME_MEANING`."""
    parser = argparse.ArgumentParser(add_help=False)
    model_class.add_args(parser)
    return tuple(sorted({action.dest for action in parser._actions if action.option_strings}
                        - SAME_MEANING))


def _get(args: Any, name: str) -> Any:
    return args.get(name) if isinstance(args, dict) else getattr(args, name, None)


def _has(args: Any, name: str) -> bool:
    return name in args if isinstance(args, dict) else hasattr(args, name)


def _plain(args: Any, name: str) -> Any:
    """The value of ``name`` as a command line would give it: a list for a list or tuple
    config, the current spelling of a deprecated ``--ffn-activation``."""
    from relu_former.relu_attention.config import LEGACY_FFN_ACTIVATIONS

    value = _get(args, name)
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        return list(value)
    if name == "ffn_activation":
        return LEGACY_FFN_ACTIVATIONS.get(value, value)
    return value


def _arch(args: Any) -> str | None:
    return _get(args, "arch") or _get(args, "_name")


def _effective_activations(args: Any) -> tuple | None:
    """The activation of each attention kind, by the model's own precedence rule."""
    from relu_former.relu_attention.config import ATTENTION_KINDS, AttentionSettings

    values = argparse.Namespace(**{name: _get(args, name) for name in _ACTIVATIONS})
    try:
        settings = AttentionSettings.from_cfg(values)
    except ValueError:
        return None
    return tuple(settings.activation(kind) for kind in ATTENTION_KINDS)


def model_differences(saved: Any, current: Any) -> list[tuple[str, Any, Any]]:
    """``(field, saved value, this run's value)`` for each meaning field that differs; an
    ``arch`` difference alone (the others follow from it). A field the checkpoint does not
    hold (saved by an older version) is not compared."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    if _arch(saved) != _arch(current):
        return [("arch", _arch(saved), _arch(current))]
    model_class = ARCH_MODEL_REGISTRY.get(_arch(current))
    if model_class is None:
        return []
    found = [(name, _plain(saved, name), _plain(current, name))
             for name in meaning_fields(model_class) if _has(saved, name)]
    found = [item for item in found if item[1] != item[2]]
    names = {name for name, _, _ in found}
    # the same activations spelled otherwise (--attention-activation softmax, or softmax per
    # kind) are the same model
    if names and names <= set(_ACTIVATIONS) and \
            _effective_activations(saved) == _effective_activations(current):
        return []
    if "attention_activation" in names:  # a per-kind flag left unset follows the shared one
        found = [item for item in found if item[0] not in _ACTIVATIONS[1:] or None not in item]
    return found


def saved_model_args(state: dict) -> Any:
    """The model arguments a loaded checkpoint was trained with (a namespace or a dict)."""
    cfg = state.get("cfg")
    return _get(cfg, "model") if cfg is not None else state.get("args")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(value: Any) -> str:
    return "(unset)" if value is None else str(value)


def _refusal(filename: str, differences: list[tuple[str, Any, Any]]) -> OptionError:
    name, saved, given = differences[0]
    others = "".join(f"; {_flag(n)} {_shown(s)} there, {_shown(g)} here"
                     for n, s, g in differences[1:])
    return OptionError(
        _flag(name),
        f"{filename} was trained with {_flag(name)} {_shown(saved)}, this run has "
        f"{_shown(given)}{others}: resuming would train it on as another model and replace "
        f"its checkpoints. To continue that run, give {_flag(name)} {_shown(saved)}; to start "
        f"a new model from its weights, give another --save-dir and --finetune-from-model "
        f"{filename} (or --reset-optimizer to load it here anyway)")


def check_resume(trainer: Any, state: dict, filename: str, reset_optimizer: bool) -> None:
    """Refuse (``OptionError``) to load ``state``, the checkpoint ``filename``, into
    ``trainer``'s model when they differ in meaning, unless ``reset_optimizer``: then warn,
    naming each change."""
    saved = saved_model_args(state)
    current = getattr(trainer.cfg, "model", None)
    differences = (model_differences(saved, current)
                   if saved is not None and current is not None else [])
    if differences and not reset_optimizer:
        raise _refusal(filename, differences)
    for name, before, after in differences:
        logger.warning(f"{filename} was trained with {_flag(name)} {_shown(before)}: "
                       f"starting a new model with {_shown(after)} from its weights")
