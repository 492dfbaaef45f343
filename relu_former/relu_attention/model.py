"""ReLUFormer: fairseq's Transformer with ReLU attention and FFN memory variants.

``relu_former`` is fairseq's ``transformer`` (every stock option keeps working) whose encoder
self-attention, decoder self-attention and cross-attention are ``ActivationMultiheadAttention``
and whose FFN may be one of the memory variants of ``relu_former.relu_attention.memory_ffn``.

How it is built, for subclasses (e.g. an encoder that also pools):

- ``ReLUFormerModel.build_encoder`` / ``build_decoder`` return ``ReLUFormerEncoder`` /
  ``ReLUFormerDecoder``; their ``build_encoder_layer`` / ``build_decoder_layer`` return
  ``ReLUFormerEncoderLayer`` / ``ReLUFormerDecoderLayer`` wrapped like fairseq's
  (activation checkpointing, FSDP) by ``wrap_layer``.
- The layers override fairseq's hooks ``build_self_attention``, ``build_encoder_attention``
  and ``build_fc2``; all three ask ``AttentionSettings`` (read from the config by
  ``AttentionSettings.from_cfg``) for the module. Another encoder can reuse ReLU attention
  with ``AttentionSettings.from_cfg(cfg).build_attention("encoder", embed_dim, heads, ...)``.
- fairseq copies every command-line argument onto the ``TransformerConfig`` it passes around,
  so the flags below reach the layers, and a checkpoint's saved arguments rebuild the same
  activations when it is loaded for decoding.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
    transformer_vaswani_wmt_en_de_big,
    transformer_wmt_en_de,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn

from relu_former.errors import OptionError
from relu_former.relu_attention.activations import ACTIVATIONS, check_activation
from relu_former.relu_attention.attention import (
    RELU_SCALINGS,
    ActivationMultiheadAttention,
    check_key_chunk_size,
    check_relu_gamma,
    check_relu_scaling,
)
from relu_former.relu_attention.memory_ffn import (
    FFN_ACTIVATIONS,
    build_memory_fc2,
    check_ffn_activation,
    memory_activation,
)

ATTENTION_KINDS = ("encoder", "decoder", "cross")
ATTENTION_KERNELS = ("fused", "reference", "triton", "flex", "tiled")
DEFAULT_DOC_KEY_CHUNK_SIZE = 512


@dataclass
class AttentionSettings:
    """The plugin's attention/FFN choices, read from fairseq args or a TransformerConfig."""

    encoder_activation: str = "relu"
    decoder_activation: str = "relu"
    cross_activation: str = "relu"
    relu_gamma: float = 1.0
    learn_gamma: bool = False
    relu_scaling: str = "factor"
    key_chunk_size: int = 0
    attention_kernel: str = "fused"
    ffn_activation: str = "relu"

    @classmethod
    def from_cfg(cls, cfg: Any) -> AttentionSettings:
        """Read and check the flags; a missing flag takes its documented default."""

        def get(name: str, default: Any) -> Any:
            value = getattr(cfg, name, None)
            return default if value is None else value

        shared = get("attention_activation", "relu")
        settings = cls(
            encoder_activation=get("encoder_attention_activation", shared),
            decoder_activation=get("decoder_attention_activation", shared),
            cross_activation=get("cross_attention_activation", shared),
            relu_gamma=float(get("relu_gamma", 1.0)),
            learn_gamma=bool(get("relu_learn_gamma", False)),
            relu_scaling=get("relu_attention_scaling", "factor"),
            key_chunk_size=int(get("attention_key_chunk_size", 0)),
            attention_kernel=get("attention_kernel", "fused"),
            ffn_activation=get("ffn_activation", "relu"),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Raise a ValueError/ImportError naming the flag for a bad or unusable setting."""
        for kind in ATTENTION_KINDS:
            check_activation(self.activation(kind),
                             f"--{kind}-attention-activation (or --attention-activation)")
        check_relu_gamma(self.relu_gamma)
        uses_relu = "relu" in (self.activation(kind) for kind in ATTENTION_KINDS)
        check_relu_scaling(self.relu_scaling, self.learn_gamma and uses_relu)
        check_key_chunk_size(self.key_chunk_size)
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise OptionError("--attention-kernel", "--attention-kernel must be one of "
                              f"{', '.join(ATTENTION_KERNELS)}, got {self.attention_kernel!r}")
        check_ffn_activation(self.ffn_activation)

    def activation(self, kind: str) -> str:
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"attention kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        return getattr(self, f"{kind}_activation")

    def build_attention(self, kind: str, embed_dim: int, num_heads: int,
                        **kwargs: Any) -> ActivationMultiheadAttention:
        """The attention module for ``kind`` (encoder, decoder or cross); kwargs go to
        fairseq's MultiheadAttention (dropout, self_attention, kdim, q_noise, ...)."""
        return ActivationMultiheadAttention(
            embed_dim, num_heads, activation=self.activation(kind),
            relu_gamma=self.relu_gamma, learn_gamma=self.learn_gamma,
            relu_scaling=self.relu_scaling, key_chunk_size=self.key_chunk_size,
            fused_kernel=_fused_kernel(self.attention_kernel), **kwargs,
        )


def _fused_kernel(kernel: str) -> bool | str:
    """--attention-kernel as the attention module takes it: fused = True (auto), reference =
    False, a fused backend's name (triton, flex, tiled) as itself."""
    return {"fused": True, "reference": False}.get(kernel, kernel)


def wrap_layer(layer: nn.Module, cfg: Any) -> nn.Module:
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer apply them."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    # a checkpointed layer is always wrapped by FSDP, whatever its size (fairseq's rule)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


class _LayerHooks:
    """The build_* hooks encoder and decoder layers share. ``self.settings`` is set before
    fairseq's ``__init__``, which calls them."""

    def plugin_attention(self, kind: str, embed_dim: int, num_heads: int, cfg,
                         **kwargs: Any) -> ActivationMultiheadAttention:
        """An attention of ``kind`` with the layer's dropout and quantisation noise."""
        return self.settings.build_attention(
            kind, embed_dim, num_heads, dropout=cfg.attention_dropout, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size, **kwargs,
        )

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return build_memory_fc2(self.settings.ffn_activation, input_dim, output_dim, q_noise,
                                qn_block_size)


class ReLUFormerEncoderLayer(_LayerHooks, TransformerEncoderLayerBase):
    """fairseq's encoder layer with the plugin's self-attention and FFN variant."""

    def __init__(self, cfg, return_fc: bool = False):
        # set before fairseq's __init__, which calls the build_* hooks below
        self.settings = AttentionSettings.from_cfg(cfg)
        super().__init__(cfg, return_fc=return_fc)
        self.activation_fn = memory_activation(self.settings.ffn_activation, self.activation_fn)

    def build_self_attention(self, embed_dim, cfg):
        return self.plugin_attention(
            "encoder", embed_dim, cfg.encoder.attention_heads, cfg, self_attention=True,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )


class ReLUFormerDecoderLayer(_LayerHooks, TransformerDecoderLayerBase):
    """fairseq's decoder layer with the plugin's self-/cross-attention and FFN variant."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        self.settings = AttentionSettings.from_cfg(cfg)
        super().__init__(cfg, no_encoder_attn=no_encoder_attn, add_bias_kv=add_bias_kv,
                         add_zero_attn=add_zero_attn)
        self.activation_fn = memory_activation(self.settings.ffn_activation, self.activation_fn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return self.plugin_attention(
            "decoder", embed_dim, cfg.decoder.attention_heads, cfg, add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn, self_attention=not cfg.cross_self_attention,
            xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return self.plugin_attention(
            "cross", embed_dim, cfg.decoder.attention_heads, cfg, kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim, encoder_decoder_attention=True,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )


class ReLUFormerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        return wrap_layer(ReLUFormerEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class ReLUFormerDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_layer(ReLUFormerDecoderLayer(cfg, no_encoder_attn), cfg)


def _choice_type(choices, flag: str):
    def parse(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(
                f"{value!r} is unknown for {flag}; choose one of {', '.join(choices)}")
        return value
    parse.__name__ = flag
    return parse


def _gamma(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--relu-gamma must be a number, got {value!r}") from None
    try:
        check_relu_gamma(number)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return number


def _chunk_size(value: str) -> int:
    try:
        number = int(value)
        check_key_chunk_size(number)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"--attention-key-chunk-size must be an integer >= 0, got {value!r}") from err
    return number


def add_relu_former_args(parser) -> None:
    """The plugin's model flags (no defaults here: the architectures fill them in)."""
    activations = ", ".join(ACTIVATIONS)
    parser.add_argument("--attention-activation", type=_choice_type(ACTIVATIONS,
                        "--attention-activation"), metavar="{" + ",".join(ACTIVATIONS) + "}",
                        help=f"attention weights for every attention ({activations}); "
                        "relu_former archs default to relu self-attention with softmax "
                        "cross-attention; giving this flag sets all three")
    for kind, what in (("encoder", "encoder self-attention"),
                       ("decoder", "decoder self-attention"),
                       ("cross", "encoder-decoder (cross) attention")):
        flag = f"--{kind}-attention-activation"
        parser.add_argument(flag, type=_choice_type(ACTIVATIONS, flag),
                            metavar="{" + ",".join(ACTIVATIONS) + "}",
                            help=f"activation of the {what} only "
                            "(default: --attention-activation)")
    parser.add_argument("--relu-gamma", type=_gamma, metavar="FLOAT",
                        help="temperature gamma of ReLU attention, out_i = sum_j s_ij v_j / "
                        "(gamma sqrt(n_i/2)); >= 1e-3 (smaller overflows), default 1")
    parser.add_argument("--relu-learn-gamma", action="store_true",
                        help="learn one gamma per head of relu attention "
                        "(initialised at --relu-gamma)")
    parser.add_argument("--relu-attention-scaling", type=_choice_type(
                        RELU_SCALINGS, "--relu-attention-scaling"),
                        metavar="{" + ",".join(RELU_SCALINGS) + "}",
                        help="how relu attention scales its scores: factor = the variance "
                        "reduction 1/(gamma sqrt(n_i/2)) (default); none = unscaled; layernorm "
                        "= unscaled, with a LayerNorm on the attention output (ablations)")
    parser.add_argument("--attention-key-chunk-size", type=_chunk_size, metavar="INT",
                        help="compute relu/rela attention over blocks of this many keys, "
                        "memory n x block instead of n x n (0 = dense, the default); "
                        "used by --attention-kernel reference")
    parser.add_argument("--attention-kernel", type=_choice_type(ATTENTION_KERNELS,
                        "--attention-kernel"), metavar="{" + ",".join(ATTENTION_KERNELS) + "}",
                        help="relu/rela attention: fused = automatic (default): the Triton "
                        "kernel on CUDA when triton is importable, else FlexAttention on CUDA "
                        "without dropout, else the tiled kernel; triton, flex, tiled force "
                        "that kernel; reference = the dense path, or the key-chunked one with "
                        "--attention-key-chunk-size")
    parser.add_argument("--ffn-activation", type=_choice_type(FFN_ACTIVATIONS,
                        "--ffn-activation"), metavar="{" + ",".join(FFN_ACTIVATIONS) + "}",
                        help="FFN as key-value memory: relu = stock FFN (--activation-fn), "
                        "softmax = fc2(softmax(fc1 x)), softmax_ln = LN(fc2(softmax(fc1 x)))")


@register_model("relu_former")
class ReLUFormerModel(TransformerModel):
    """Transformer with ReLU attention (or a baseline activation) and FFN memory variants."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_relu_former_args(parser)

    @classmethod
    def build_model(cls, args, task):
        relu_former_architecture(args)  # fills flags absent from older saved arguments
        AttentionSettings.from_cfg(args)  # fail early, naming the flag
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return ReLUFormerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return ReLUFormerDecoder(cfg, tgt_dict, embed_tokens,
                                 no_encoder_attn=cfg.no_cross_attention)


def _default(args, name: str, value: Any) -> None:
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def _relu_former_defaults(args) -> None:
    if getattr(args, "attention_activation", None) is None:
        # Measured (docs/relu_former.md, "Ablations"): softmax cross-attention under ReLU
        # self-attention closes the BLEU gap to softmax; the paper does not specify the
        # cross-attention. --attention-activation relu gives the all-ReLU model.
        _default(args, "cross_attention_activation", "softmax")
    _default(args, "attention_activation", "relu")
    _default(args, "relu_gamma", 1.0)
    _default(args, "relu_learn_gamma", False)
    _default(args, "relu_attention_scaling", "factor")
    _default(args, "attention_key_chunk_size", 0)
    _default(args, "attention_kernel", "fused")
    _default(args, "ffn_activation", "relu")


@register_model_architecture("relu_former", "relu_former")
def relu_former_architecture(args):
    """Transformer base sizes (6+6 layers, 512/2048, 8 heads) with ReLU attention."""
    _relu_former_defaults(args)
    base_architecture(args)


@register_model_architecture("relu_former", "relu_former_iwslt_de_en")
def relu_former_iwslt_de_en(args):
    """The paper's IWSLT14 De-En model: 6+6 layers, 512/1024, 4 heads."""
    _relu_former_defaults(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("relu_former", "relu_former_wmt_en_de")
def relu_former_wmt_en_de(args):
    """The paper's WMT14 En-De model: 6+6 layers, 512/2048, 8 heads."""
    _relu_former_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("relu_former", "relu_former_wmt_en_de_big")
def relu_former_wmt_en_de_big(args):
    """Transformer big sizes: 6+6 layers, 1024/4096, 16 heads, dropout 0.3."""
    _relu_former_defaults(args)
    transformer_vaswani_wmt_en_de_big(args)


@register_model_architecture("relu_former", "relu_former_doc")
def relu_former_doc(args):
    """Document-level translation (Europarl7, up to 2048 tokens): WMT base sizes, 2048
    positions, ReLU attention over blocks of 512 keys."""
    _default(args, "max_source_positions", 2048)
    _default(args, "max_target_positions", 2048)
    _default(args, "attention_key_chunk_size", DEFAULT_DOC_KEY_CHUNK_SIZE)
    _relu_former_defaults(args)
    transformer_wmt_en_de(args)
