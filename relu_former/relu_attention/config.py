"""Every default and every check of the ReLU attention settings, once (torch-only).

The flags, their destinations on fairseq's args, the module keyword arguments and the fields
of ``AttentionSettings`` carry the same name (``--relu-gamma`` -> ``relu_gamma``, ...), so a
setting can be followed from the command line to the kernel. The architectures
(``relu_attention/model.py``) fill the defaults below into args; the module constructor and
the kernels take them as their keyword defaults. Each check raises ``OptionError`` naming the
flag; the flags' argparse types (``relu_former/flag_types.py``) call the same checks, so a bad
value fails at parse time.

Deprecated spellings still accepted (old commands and checkpoints): ``--attention-kernel
fused|reference|triton|flex|tiled`` (now ``--attention-backend auto|reference|...``; a key
chunk size saved with ``fused``, which ignored it, is dropped on load) and
``--ffn-activation relu`` (now ``stock``: it always meant the layer's own ``--activation-fn``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from relu_former.errors import OptionError
from relu_former.relu_attention.activations import check_activation
from relu_former.relu_attention.kernels.dispatch import BACKEND_NAMES, check_backend

logger = logging.getLogger(__name__)

ATTENTION_KINDS = ("encoder", "decoder", "cross")
RELU_SCALINGS = ("factor", "none", "layernorm")
FFN_ACTIVATIONS = ("stock", "softmax", "softmax_ln")
# --ffn-activation relu (deprecated) meant the stock FFN, whatever --activation-fn is
LEGACY_FFN_ACTIVATIONS = {"relu": "stock"}

# -- the defaults, each once -----------------------------------------------------------------
DEFAULT_ATTENTION_ACTIVATION = "relu"
# The arch's cross-attention when --attention-activation is not given. The paper's ReLUFormer
# is "a full ReLU architecture", so ReLU; our hybrid (softmax cross-attention) is
# --cross-attention-activation softmax, not recommended until a multi-seed table supports it
# (docs/reproduction.md, table 5). Change it here only.
DEFAULT_CROSS_ATTENTION_ACTIVATION = "relu"
DEFAULT_RELU_GAMMA = 1.0
DEFAULT_RELU_LEARN_GAMMA = False
DEFAULT_RELU_ATTENTION_SCALING = "factor"
DEFAULT_ATTENTION_BACKEND = "auto"
DEFAULT_ATTENTION_KEY_CHUNK_SIZE = 0
DEFAULT_FFN_ACTIVATION = "stock"
DEFAULT_DOC_MAX_POSITIONS = 2048

# The regularisers (criterions/regularized.py): the paper's weights could not be verified;
# 0.1 each keeps either term well below the cross-entropy at initialisation.
DEFAULT_NORM_LOSS_WEIGHT = 0.1
DEFAULT_ENTROPY_LOSS_WEIGHT = 0.1
DEFAULT_ENTROPY_MARGIN = 0.7  # the paper's C
DEFAULT_ENTROPY_MARGIN_SIDE = "below"
DEFAULT_NORM_ROW_SUM = "scores"

# gamma divides the attention output, so a tiny gamma makes it huge: measured on a 1-layer
# model, fairseq's LayerNorm overflows float32 (it squares the output) and the first update is
# NaN from gamma = 1e-19 on (1e-20 with pre-norm); in half precision (max 65504) the output
# itself overflows once |out| / gamma > 65504. The floor keeps far from both; the paper's
# temperatures are near 1.
MIN_RELU_GAMMA = 1e-3

# --attention-kernel (deprecated) -> --attention-backend
LEGACY_KERNELS = {"fused": "auto", "reference": "reference", "triton": "triton",
                  "flex": "flex", "tiled": "tiled"}


def check_relu_gamma(gamma: float, flag: str = "--relu-gamma") -> None:
    """Raise an OptionError naming the flag unless gamma is finite and >= MIN_RELU_GAMMA."""
    if gamma is None or not math.isfinite(gamma) or gamma <= 0:
        raise OptionError(flag, f"{flag} must be a finite number > 0, got {gamma}")
    if gamma < MIN_RELU_GAMMA:
        raise OptionError(flag, f"{flag} must be >= {MIN_RELU_GAMMA:g}, got {gamma:g}: the "
                          "attention output is divided by gamma, and below that it overflows "
                          "(NaN from the first update)")


def check_relu_attention_scaling(scaling: str, learn_gamma: bool = False,
                                 flag: str = "--relu-attention-scaling") -> None:
    """Raise an OptionError naming the flag for an unknown scaling or one without gamma."""
    if scaling not in RELU_SCALINGS:
        raise OptionError(flag, f"{flag} {scaling!r} is unknown; choose one of "
                          f"{', '.join(RELU_SCALINGS)}")
    if learn_gamma and scaling != "factor":
        raise OptionError("--relu-learn-gamma", "--relu-learn-gamma learns the gamma of the "
                          f"variance reduction factor, which {flag} {scaling} removes; drop "
                          "one of the two")


def check_ffn_activation(name: str, flag: str = "--ffn-activation") -> None:
    """Raise an OptionError naming the flag for an unknown FFN variant (old names accepted)."""
    if name not in FFN_ACTIVATIONS and name not in LEGACY_FFN_ACTIVATIONS:
        raise OptionError(flag, f"{flag} {name!r} is unknown; choose one of "
                          f"{', '.join(FFN_ACTIVATIONS)}")


def check_finite_weight(value: float, flag: str) -> None:
    """A regulariser weight or margin: a finite number >= 0."""
    if value is None or not math.isfinite(value) or value < 0:
        raise OptionError(flag, f"{flag} must be a finite number >= 0, got {value}")


def upgrade_legacy_ffn_activation(args: Any) -> None:
    """``--ffn-activation relu`` (deprecated) is ``stock``: the layer's own --activation-fn."""
    name = getattr(args, "ffn_activation", None)
    if name in LEGACY_FFN_ACTIVATIONS:
        args.ffn_activation = LEGACY_FFN_ACTIVATIONS[name]


def upgrade_legacy_args(args: Any) -> None:
    """Translate the deprecated spellings of old commands/checkpoints in place."""
    upgrade_legacy_ffn_activation(args)
    legacy = getattr(args, "attention_kernel", None)
    if legacy is None:
        return
    if legacy not in LEGACY_KERNELS:
        raise OptionError("--attention-kernel", f"--attention-kernel {legacy!r} is unknown; "
                          f"use --attention-backend {{{','.join(BACKEND_NAMES)}}}")
    if getattr(args, "attention_backend", None) is None:
        args.attention_backend = LEGACY_KERNELS[legacy]
        logger.warning("--attention-kernel is deprecated: read as --attention-backend %s",
                       LEGACY_KERNELS[legacy])
    chunk = getattr(args, "attention_key_chunk_size", None)
    if legacy == "fused" and chunk:
        # the fused kernel never read it: dropping it changes nothing the model computes
        args.attention_key_chunk_size = 0
    args.attention_kernel = None


def given_activation(cfg: Any, kind: str) -> str | None:
    """The activation the flags give attention ``kind``: its own flag
    (``--encoder-attention-activation`` ...), else ``--attention-activation``, else None (the
    architecture's default then applies). The one statement of this precedence."""
    own = getattr(cfg, f"{kind}_attention_activation", None)
    return own if own is not None else getattr(cfg, "attention_activation", None)


@dataclass
class AttentionSettings:
    """The plugin's attention/FFN choices, named as their flags' destinations."""

    encoder_attention_activation: str = DEFAULT_ATTENTION_ACTIVATION
    decoder_attention_activation: str = DEFAULT_ATTENTION_ACTIVATION
    cross_attention_activation: str = DEFAULT_CROSS_ATTENTION_ACTIVATION
    relu_gamma: float = DEFAULT_RELU_GAMMA
    relu_learn_gamma: bool = DEFAULT_RELU_LEARN_GAMMA
    relu_attention_scaling: str = DEFAULT_RELU_ATTENTION_SCALING
    attention_backend: str = DEFAULT_ATTENTION_BACKEND
    attention_key_chunk_size: int = DEFAULT_ATTENTION_KEY_CHUNK_SIZE
    ffn_activation: str = DEFAULT_FFN_ACTIVATION

    @classmethod
    def from_cfg(cls, cfg: Any) -> AttentionSettings:
        """Read and check the flags; a missing flag takes the default above.

        ``--attention-activation`` sets all three kinds; without it the per-kind flags or
        the defaults (cross: ``DEFAULT_CROSS_ATTENTION_ACTIVATION``) apply.
        """
        upgrade_legacy_args(cfg)
        values = {name: getattr(cfg, name, None) for name in cls.__dataclass_fields__}
        for kind in ATTENTION_KINDS:
            values[f"{kind}_attention_activation"] = given_activation(cfg, kind)
        settings = cls(**{k: v for k, v in values.items() if v is not None})
        settings.relu_gamma = float(settings.relu_gamma)
        settings.relu_learn_gamma = bool(settings.relu_learn_gamma)
        settings.attention_key_chunk_size = int(settings.attention_key_chunk_size)
        settings.check()
        return settings

    def check(self) -> None:
        """Raise an OptionError/ImportError naming the flag for a bad or unusable setting."""
        for kind in ATTENTION_KINDS:
            check_activation(self.activation(kind),
                             f"--{kind}-attention-activation (or --attention-activation)")
        check_relu_gamma(self.relu_gamma)
        uses_relu = "relu" in (self.activation(kind) for kind in ATTENTION_KINDS)
        check_relu_attention_scaling(self.relu_attention_scaling,
                                     self.relu_learn_gamma and uses_relu)
        check_backend(self.attention_backend, self.attention_key_chunk_size)
        check_ffn_activation(self.ffn_activation)

    def activation(self, kind: str) -> str:
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"attention kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        return getattr(self, f"{kind}_attention_activation")

    def module_kwargs(self, kind: str) -> dict:
        """The keyword arguments of ``ActivationMultiheadAttention`` for ``kind``."""
        return dict(activation=self.activation(kind), relu_gamma=self.relu_gamma,
                    relu_learn_gamma=self.relu_learn_gamma,
                    relu_attention_scaling=self.relu_attention_scaling,
                    attention_backend=self.attention_backend,
                    attention_key_chunk_size=self.attention_key_chunk_size)


def fill_arch_defaults(args: Any) -> None:
    """The relu_former architectures' defaults, written into args where a flag is absent."""
    upgrade_legacy_args(args)
    if getattr(args, "attention_activation", None) is None:
        _default(args, "cross_attention_activation", DEFAULT_CROSS_ATTENTION_ACTIVATION)
    for name, value in (("attention_activation", DEFAULT_ATTENTION_ACTIVATION),
                        ("relu_gamma", DEFAULT_RELU_GAMMA),
                        ("relu_learn_gamma", DEFAULT_RELU_LEARN_GAMMA),
                        ("relu_attention_scaling", DEFAULT_RELU_ATTENTION_SCALING),
                        ("attention_backend", DEFAULT_ATTENTION_BACKEND),
                        ("attention_key_chunk_size", DEFAULT_ATTENTION_KEY_CHUNK_SIZE),
                        ("ffn_activation", DEFAULT_FFN_ACTIVATION)):
        _default(args, name, value)


def _default(args: Any, name: str, value: Any) -> None:
    if getattr(args, name, None) is None:
        setattr(args, name, value)

