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
  ``AttentionSettings.from_cfg``, ``config.py``) for the module. Another encoder can reuse
  ReLU attention with ``build_attention(AttentionSettings.from_cfg(cfg), "encoder", ...)``.
- fairseq copies every command-line argument onto the ``TransformerConfig`` it passes around,
  so the flags below reach the layers, and a checkpoint's saved arguments rebuild the same
  activations when it is loaded for decoding.
"""

from __future__ import annotations

from typing import Any, List

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

from relu_former.flag_types import argparse_type, choice_type, int_at_least
from relu_former.relu_attention.activations import ACTIVATIONS
from relu_former.relu_attention.attention import ActivationMultiheadAttention
from relu_former.relu_attention.config import (
    BACKEND_NAMES,
    DEFAULT_DOC_MAX_POSITIONS,
    FFN_ACTIVATIONS,
    LEGACY_FFN_ACTIVATIONS,
    LEGACY_KERNELS,
    RELU_SCALINGS,
    AttentionSettings,
    check_relu_gamma,
    fill_arch_defaults,
)
from relu_former.relu_attention.memory_ffn import build_memory_fc2, memory_activation
from relu_former.relu_attention.statistics import AttentionStatisticsMixin


def build_attention(settings: AttentionSettings, kind: str, embed_dim: int, num_heads: int,
                    **kwargs: Any) -> ActivationMultiheadAttention:
    """The attention module for ``kind`` (encoder, decoder or cross); kwargs go to
    fairseq's MultiheadAttention (dropout, self_attention, kdim, q_noise, ...)."""
    return ActivationMultiheadAttention(embed_dim, num_heads, **settings.module_kwargs(kind),
                                        **kwargs)


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
        return build_attention(
            self.settings, kind, embed_dim, num_heads, dropout=cfg.attention_dropout,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size, **kwargs,
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

    def attention_modules(self) -> List[ActivationMultiheadAttention]:
        return [self.self_attn]

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

    def attention_modules(self) -> List[ActivationMultiheadAttention]:
        return [self.self_attn] + ([self.encoder_attn] if self.encoder_attn is not None else [])

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


def add_relu_former_args(parser) -> None:
    """The plugin's model flags (no defaults here: the architectures fill them in)."""
    activations = ", ".join(ACTIVATIONS)
    parser.add_argument("--attention-activation", type=choice_type(ACTIVATIONS,
                        "--attention-activation"), metavar="{" + ",".join(ACTIVATIONS) + "}",
                        help=f"attention weights for every attention ({activations}); "
                        "relu_former archs default to relu in all three (the paper's full-ReLU "
                        "model); the --*-attention-activation flags override one each")
    for kind, what in (("encoder", "encoder self-attention"),
                       ("decoder", "decoder self-attention"),
                       ("cross", "encoder-decoder (cross) attention")):
        flag = f"--{kind}-attention-activation"
        parser.add_argument(flag, type=choice_type(ACTIVATIONS, flag),
                            metavar="{" + ",".join(ACTIVATIONS) + "}",
                            help=f"activation of the {what} only "
                            "(default: --attention-activation)")
    parser.add_argument("--relu-gamma", type=argparse_type("--relu-gamma", float,
                                                            check_relu_gamma), metavar="FLOAT",
                        help="temperature gamma of ReLU attention, out_i = sum_j s_ij v_j / "
                        "(gamma sqrt(n_i/2)); >= 1e-3 (smaller overflows), default 1")
    parser.add_argument("--relu-learn-gamma", action="store_true",
                        help="learn one gamma per head of relu attention "
                        "(initialised at --relu-gamma)")
    parser.add_argument("--relu-attention-scaling", type=choice_type(
                        RELU_SCALINGS, "--relu-attention-scaling"),
                        metavar="{" + ",".join(RELU_SCALINGS) + "}",
                        help="how relu attention scales its scores: factor = the variance "
                        "reduction 1/(gamma sqrt(n_i/2)) (default); none = unscaled; layernorm "
                        "= unscaled, with a LayerNorm on the attention output (ablations)")
    parser.add_argument("--attention-backend", type=choice_type(BACKEND_NAMES,
                        "--attention-backend"), metavar="{" + ",".join(BACKEND_NAMES) + "}",
                        help="kernel of relu/rela attention: auto = cpp on the CPU where the "
                        "install built it (else tiled), triton or FlexAttention on CUDA "
                        "(default); cpp = compiled C++ tiles; tiled = tiles in torch "
                        "operations; neither holds the n x n matrix; flex = FlexAttention; "
                        "triton = the Triton kernel; reference = the dense path, or key blocks "
                        "with --attention-key-chunk-size")
    parser.add_argument("--attention-key-chunk-size", type=int_at_least(
                        "--attention-key-chunk-size", 0, " (0 = dense attention)"), metavar="INT",
                        help="reference backend only (an error with the others, which tile "
                        "anyway): relu/rela attention over blocks of this many keys, memory "
                        "n x block instead of n x n (0 = dense, the default)")
    parser.add_argument("--attention-kernel", type=choice_type(tuple(LEGACY_KERNELS),
                        "--attention-kernel"), metavar="{" + ",".join(LEGACY_KERNELS) + "}",
                        help="deprecated, read as --attention-backend: fused = auto, "
                        "reference = reference")
    parser.add_argument("--ffn-activation", type=choice_type(
                        FFN_ACTIVATIONS + tuple(LEGACY_FFN_ACTIVATIONS), "--ffn-activation"),
                        metavar="{" + ",".join(FFN_ACTIVATIONS) + "}",
                        help="FFN as key-value memory: stock = the stock FFN with "
                        "--activation-fn (default; 'relu' is its deprecated name), softmax = "
                        "fc2(softmax(fc1 x)), softmax_ln = LN(fc2(softmax(fc1 x)))")


@register_model("relu_former")
class ReLUFormerModel(AttentionStatisticsMixin, TransformerModel):
    """Transformer with ReLU attention (or a baseline activation) and FFN memory variants.

    ``requested_attention_statistics()`` / ``attention_statistics()`` (the mixin) are how a
    criterion asks for the attention statistics; without a request none is computed.
    """

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

    decoder_class = ReLUFormerDecoder  # a subclass model may return its own decoder

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return cls.decoder_class(cfg, tgt_dict, embed_tokens,
                                 no_encoder_attn=cfg.no_cross_attention)


def _relu_former_defaults(args) -> None:
    fill_arch_defaults(args)


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
    """Document-level translation (Europarl7, up to 2048 tokens): WMT base sizes and 2048
    positions; ReLU attention on the default backend, whose tiles never hold n x n."""
    _default(args, "max_source_positions", DEFAULT_DOC_MAX_POSITIONS)
    _default(args, "max_target_positions", DEFAULT_DOC_MAX_POSITIONS)
    _relu_former_defaults(args)
    transformer_wmt_en_de(args)


def _default(args, name: str, value: Any) -> None:
    if getattr(args, name, None) is None:
        setattr(args, name, value)
