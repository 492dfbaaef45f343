"""A fairseq multi-head attention with a choice of activation (ReLU, softmax, sparsemax, ...).

``ActivationMultiheadAttention`` is a drop-in subclass of ``fairseq.modules.MultiheadAttention``:
same constructor arguments and forward signature, same projections, parameter names and
incremental-decoding buffers (so ``reorder_incremental_state`` and beam search work as for the
stock module), plus the keyword arguments ``activation``, ``relu_gamma``, ``relu_learn_gamma``,
``relu_attention_scaling``, ``attention_backend`` and ``attention_key_chunk_size``, named as
the flags and their defaults in ``relu_former.relu_attention.config``. The weights themselves
come from ``relu_former.relu_attention.activations`` (kernels in ``kernels/``).

It never takes the stock module's fused ``F.multi_head_attention_forward`` path (that path is
softmax only): ``forward`` is written here in full and does not call the parent's ``forward``.
The activation is a constructor argument stored on the module (``module.activation``), so a
model rebuilt from a checkpoint's saved arguments gets the same activation back.

Masks, as fairseq passes them: ``key_padding_mask`` (B, Tk), True/1 = padding; ``attn_mask``
(Tq, Tk) or (B*H, Tq, Tk), bool/uint8 True = blocked, or fairseq's additive float mask, where
every negative entry (-inf, -1e8) blocks the key. Blocked keys get weight 0 and do not count in
n_i.

Statistics only on request: while ``need_statistics`` is True (``record_statistics``, called
by the model's ``requested_attention_statistics``, which a criterion enters;
``relu_former.relu_attention.statistics``) each forward stores the per-row figures of
``AttentionStatistics`` (ReLU row sums S_i and entropies H_i with their gradients, zero
counts, n_i), read with ``attention_statistics()``; leaving the request clears them.
Otherwise no statistic is computed, in any backend, and softmax runs through torch's fused
SDPA.

``relu_attention_scaling`` (relu attention only; the ablations of the ReLUFormer paper,
Table 5):
``factor`` multiplies the ReLU scores by 1/(gamma sqrt(n_i/2)), the paper's variance
reduction; ``none`` leaves them unscaled; ``layernorm`` leaves them unscaled and puts a
LayerNorm over the model width on the attention output (the heads concatenated, before the
output projection).

relu and rela attention run on ``attention_backend`` (``kernels/dispatch.py``, which checks it
once, when ``bind_attention`` binds it: auto = triton, then flex, on CUDA, the compiled kernel
on the CPU, else tiled; reference = dense, or key-chunked with ``attention_key_chunk_size``).

In training, weights are returned only when ``module.training_weights`` is True: fairseq's
decoder asks its alignment layer for weights at every step (``need_weights`` and
``need_head_weights``) and averages them into ``extra["attn"]``, which no training loss of
this plugin reads, and materialising them would make that layer the one attention of the model
whose memory grows with Tq x Tk. Set ``training_weights`` for a loss on the weights (e.g. an
alignment loss); in evaluation (analysis, generation) weights are returned as asked.

With ``need_weights`` the returned weights are the ones applied to the values: for relu
s_ij / (gamma sqrt(n_i/2)) (s_ij without the factor), for softmax/sparsemax/entmax15 the
normalised rows, for rela the ReLU scores before its RMS normalisation.
"""

from __future__ import annotations

import logging
import math
from typing import Dict, Tuple

import torch
from fairseq.modules import LayerNorm, MultiheadAttention
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from relu_former.relu_attention.activations import bind_attention
from relu_former.relu_attention.config import (
    DEFAULT_ATTENTION_BACKEND,
    DEFAULT_ATTENTION_KEY_CHUNK_SIZE,
    DEFAULT_RELU_ATTENTION_SCALING,
    DEFAULT_RELU_GAMMA,
    DEFAULT_RELU_LEARN_GAMMA,
    check_relu_attention_scaling,
    check_relu_gamma,
)
from relu_former.relu_attention.kernels.common import AttentionStatistics, variance_factor

logger = logging.getLogger(__name__)

# Activations that can run over blocks of keys (their weights need no row normalisation).
CHUNKABLE = ("relu", "rela")

# Which row sum ``attention_statistics`` reports: the ReLU scores' or the applied weights'.
ROW_SUMS = ("scores", "weights")


def blocked_keys(attn_mask: Tensor | None, bsz: int, num_heads: int) -> Tensor | None:
    """fairseq's attention mask as a bool mask (True = blocked), 2-d or (B, H, Tq, Tk)."""
    if attn_mask is None:
        return None
    blocked = attn_mask < 0 if attn_mask.is_floating_point() else attn_mask.bool()
    if blocked.dim() == 3:
        blocked = blocked.view(bsz, num_heads, blocked.size(-2), blocked.size(-1))
    return blocked


class ActivationMultiheadAttention(MultiheadAttention):
    """Multi-head attention whose weights use ``activation`` (see the module docstring).

    Args beyond fairseq's, each named and checked as its flag (``config.py``): ``activation``
    one of softmax, relu, sparsemax, entmax15, rela; ``relu_gamma`` the temperature gamma of
    relu attention; ``relu_learn_gamma`` learn one gamma per head (stored as its log,
    initialised at ``relu_gamma``); ``relu_attention_scaling`` factor, none or layernorm
    (relu only); ``attention_backend`` the relu/rela kernel; ``attention_key_chunk_size``
    blocks of keys for the reference backend (0 = dense).
    """

    def __init__(self, embed_dim, num_heads, kdim=None, vdim=None, dropout=0.0, bias=True,
                 add_bias_kv=False, add_zero_attn=False, self_attention=False,
                 encoder_decoder_attention=False, dictionary=None, q_noise=0.0,
                 qn_block_size=8, xformers_att_config: str | None = None,
                 xformers_blocksparse_layout=None, xformers_blocksparse_blocksize=16, *,
                 activation: str = "relu", relu_gamma: float = DEFAULT_RELU_GAMMA,
                 relu_learn_gamma: bool = DEFAULT_RELU_LEARN_GAMMA,
                 relu_attention_scaling: str = DEFAULT_RELU_ATTENTION_SCALING,
                 attention_backend: str = DEFAULT_ATTENTION_BACKEND,
                 attention_key_chunk_size: int = DEFAULT_ATTENTION_KEY_CHUNK_SIZE):
        check_relu_gamma(relu_gamma)
        check_relu_attention_scaling(relu_attention_scaling,
                                     relu_learn_gamma and activation == "relu")
        if xformers_att_config:
            raise ValueError(
                "--encoder-xformers-att-config/--decoder-xformers-att-config replace the "
                "attention computation and cannot be combined with --attention-activation; "
                "drop the xformers option"
            )
        super().__init__(embed_dim, num_heads, kdim=kdim, vdim=vdim, dropout=dropout,
                         bias=bias, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                         self_attention=self_attention,
                         encoder_decoder_attention=encoder_decoder_attention,
                         dictionary=dictionary, q_noise=q_noise, qn_block_size=qn_block_size)
        self._set_options(activation, relu_gamma, relu_learn_gamma, relu_attention_scaling,
                          attention_backend, attention_key_chunk_size)
        self._build_parameters(embed_dim, num_heads, q_noise, qn_block_size)
        # the activation's function, every option checked, bound once (activations.py); its
        # tensors (a learned gamma, ReLA's gain) come per call from ``_attention_parameters``
        self._attention = bind_attention(
            activation, backend=attention_backend, key_chunk_size=attention_key_chunk_size,
            variance_reduction=self.relu_attention_scaling == "factor")
        self._attention_parameters = {"relu": self._gamma_parameter,
                                      "rela": self._gain_parameter}.get(activation, dict)
        self.training_weights = False
        self.need_statistics = False
        self._statistics: AttentionStatistics | None = None

    def _set_options(self, activation: str, relu_gamma: float, relu_learn_gamma: bool,
                     relu_attention_scaling: str, attention_backend: str,
                     attention_key_chunk_size: int) -> None:
        self.activation = activation
        self.relu_gamma = float(relu_gamma)
        self.relu_learn_gamma = bool(relu_learn_gamma) and activation == "relu"
        self.relu_attention_scaling = (relu_attention_scaling if activation == "relu"
                                       else "factor")
        self.attention_backend = attention_backend
        self.attention_key_chunk_size = int(attention_key_chunk_size)
        if self.attention_key_chunk_size and activation not in CHUNKABLE:
            logger.warning("key chunking applies to relu and rela attention; %s attention "
                           "is computed dense", activation)

    def _build_parameters(self, embed_dim: int, num_heads: int, q_noise: float,
                          qn_block_size: int) -> None:
        """gamma's log, ReLA's gate and gain, the output LayerNorm (names as in checkpoints)."""
        self.log_gamma = (nn.Parameter(torch.full((num_heads,), math.log(self.relu_gamma)))
                          if self.relu_learn_gamma else None)
        if self.activation == "rela":
            self.rela_gate = quant_noise(nn.Linear(embed_dim, embed_dim, bias=False), q_noise,
                                         qn_block_size)
            self.rela_gain = nn.Parameter(torch.ones(num_heads, 1, self.head_dim))
        else:
            self.rela_gate = None
            self.rela_gain = None
        self.relu_output_norm = (LayerNorm(embed_dim)
                                 if self.relu_attention_scaling == "layernorm" else None)

    def _gamma_parameter(self) -> dict:
        return {"gamma": self.gamma}

    def _gain_parameter(self) -> dict:
        return {"gain": self.rela_gain}

    @property
    def gamma(self):
        """gamma: the fixed float, or the learned per-head tensor exp(log_gamma)."""
        return self.log_gamma.exp() if self.log_gamma is not None else self.relu_gamma

    def record_statistics(self, on: bool) -> None:
        """Record the per-row statistics of each forward pass from now on (or stop, and
        forget the last ones)."""
        self.need_statistics = on
        self._statistics = None

    def attention_statistics(self, row_sum: str = "scores") -> AttentionStatistics | None:
        """The per-row figures of the last forward pass under ``need_statistics`` (else None).

        ``row_sum="scores"``: S_i = sum_j s_ij, the ReLU scores; ``"weights"``: the row sums
        of the weights applied to the values, S_i / (gamma sqrt(n_i/2)) with the variance
        factor (with gradient through a learned gamma), S_i without it. Entropies are the
        same either way (a row's scale does not change them).
        """
        stats = self._statistics
        if row_sum not in ROW_SUMS:
            raise ValueError(f"row_sum must be one of {ROW_SUMS}, got {row_sum!r}")
        if (stats is None or row_sum == "scores" or not stats.regularizable
                or self.relu_attention_scaling != "factor"):
            return stats
        factor = variance_factor(stats.n, self.gamma).to(stats.row_sum.dtype)
        return stats._replace(row_sum=stats.row_sum * factor)

    def extra_repr(self) -> str:
        return (f"activation={self.activation}, relu_gamma={self.relu_gamma}, "
                f"relu_learn_gamma={self.relu_learn_gamma}, "
                f"relu_attention_scaling={self.relu_attention_scaling}, "
                f"attention_backend={self.attention_backend}, "
                f"attention_key_chunk_size={self.attention_key_chunk_size}")

    def _project(self, query: Tensor, key: Tensor | None, value: Tensor | None):
        q = self.q_proj(query)
        if self.self_attention:
            return q, self.k_proj(query), self.v_proj(query)
        if self.encoder_decoder_attention and key is None:
            return q, None, None
        return q, self.k_proj(key), self.v_proj(key if self.encoder_decoder_attention
                                                 else value)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(T, B, E) -> (B, H, T, D)."""
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None,
        value: Tensor | None,
        key_padding_mask: Tensor | None = None,
        incremental_state: Dict[str, Dict[str, Tensor | None]] | None = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Tensor | None = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Tensor | None]:
        """Input (T, B, E); returns (output (T, B, E), weights or None) as fairseq's module."""
        if self.training and not self.training_weights:
            # see the module docstring: weights in training only on request
            need_weights = need_head_weights = False
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.size()
        assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        saved_state = (self._get_input_buffer(incremental_state)
                       if incremental_state is not None else None)
        if saved_state is not None and static_kv and "prev_key" in saved_state:
            # the encoder's keys and values are cached after the first step
            assert self.encoder_decoder_attention and not self.self_attention
            key = value = None
        query_padding_mask = self._query_padding(key_padding_mask, tgt_len, incremental_state)
        key, key_padding_mask = self._share_beam_keys(key, key_padding_mask, bsz)

        q, k, v, key_padding_mask, attn_mask = self._heads(
            query, key, value, key_padding_mask, attn_mask, bsz)
        if saved_state is not None:
            k, v, key_padding_mask = self._update_cache(saved_state, k, v, key_padding_mask,
                                                        static_kv, bsz)
            self._set_input_buffer(incremental_state, saved_state)
        assert k is not None and v is not None
        if self.add_zero_attn:
            k, v, key_padding_mask, attn_mask = self._append_zero_attn(
                k=k, v=v, key_padding_mask=key_padding_mask, attn_mask=attn_mask)

        padding = key_padding_mask.bool() if key_padding_mask is not None else None
        blocked = blocked_keys(attn_mask, bsz, self.num_heads)
        if before_softmax:
            return self._raw_scores(q, k, v, padding, blocked)
        out, weights = self._attend(q, k, v, padding, blocked, query_padding_mask,
                                    need_weights)
        out = self._output(out, query)
        return out, self._returned_weights(weights, need_weights, need_head_weights)

    def _query_padding(self, key_padding_mask: Tensor | None, tgt_len: int,
                       incremental_state: Dict | None) -> Tensor | None:
        """Padded queries, excluded from the statistics (known for self-attention only)."""
        if (self.self_attention and incremental_state is None and key_padding_mask is not None
                and key_padding_mask.size(1) == tgt_len):
            return key_padding_mask.bool()
        return None

    def _share_beam_keys(self, key: Tensor | None, key_padding_mask: Tensor | None,
                         bsz: int) -> Tuple[Tensor | None, Tensor | None]:
        """In beam search every hypothesis of a sentence shares its encoder output: keep one."""
        if not (self.encoder_decoder_attention and key is not None and self.beam_size > 1
                and bsz == key.size(1)):
            return key, key_padding_mask
        key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0, :]
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.view(
                -1, self.beam_size, key_padding_mask.size(1))[:, 0, :]
        return key, key_padding_mask

    def _heads(self, query: Tensor, key: Tensor | None, value: Tensor | None,
               key_padding_mask: Tensor | None, attn_mask: Tensor | None, bsz: int):
        """Projections (with fairseq's optional bias_k/bias_v) split into (B, H, T, D) heads."""
        q, k, v = self._project(query, key, value)
        if self.bias_k is not None:
            k, v, key_padding_mask, attn_mask = self._add_bias(k, v, key_padding_mask,
                                                               attn_mask, bsz)
        q = self._split_heads(q)
        k = self._split_heads(k) if k is not None else None
        v = self._split_heads(v) if v is not None else None
        return q, k, v, key_padding_mask, attn_mask

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, padding: Tensor | None,
                blocked: Tensor | None, query_padding_mask: Tensor | None,
                need_weights: bool) -> Tuple[Tensor, Tensor | None]:
        """The activation's output (B, H, Tq, D) and weights; records the row statistics.

        With beam-shared encoder keys (fewer key rows than query rows) the hypotheses of a
        sentence are folded into its queries for the kernel and unfolded after it.
        """
        kv_bsz, tgt_len = k.size(0), q.size(2)
        beam = q.size(0) // kv_bsz
        if beam > 1:
            assert blocked is None, "an attention mask with shared encoder keys"
            q = q.reshape(kv_bsz, beam, self.num_heads, tgt_len, self.head_dim)
            q = q.transpose(1, 2).reshape(kv_bsz, self.num_heads, beam * tgt_len, -1)
        record = self.need_statistics
        dropout_p = (self.dropout_module.p
                     if self.training or self.dropout_module.apply_during_inference else 0.0)
        result = self._attention(
            q, k, v, key_padding_mask=padding, attn_mask=blocked, dropout_p=dropout_p,
            need_weights=need_weights, need_statistics=record,
            query_padding_mask=query_padding_mask if beam == 1 else None,
            **self._attention_parameters())
        self._statistics = result.statistics if record else None
        out, weights = result.out, result.weights
        if beam > 1:
            out = self._unfold_beam(out, kv_bsz, beam, tgt_len)
            weights = self._unfold_beam(weights, kv_bsz, beam, tgt_len) if need_weights else None
        return out, weights

    def _output(self, out: Tensor, query: Tensor) -> Tensor:
        """Heads (B, H, Tq, D) merged to (Tq, B, E), the output norm or ReLA's gate, the
        output projection."""
        batch, _, tgt_len, _ = out.shape
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, batch, self.embed_dim)
        if self.relu_output_norm is not None:
            out = self.relu_output_norm(out)
        if self.rela_gate is not None:
            out = out * torch.sigmoid(self.rela_gate(query))
        return self.out_proj(out)

    @staticmethod
    def _returned_weights(weights: Tensor | None, need_weights: bool,
                          need_head_weights: bool) -> Tensor | None:
        """(H, B, Tq, Tk) per head, or their mean over heads, as fairseq returns them."""
        if not need_weights:
            return None
        weights = weights.transpose(1, 0)
        return weights if need_head_weights else weights.mean(dim=0)

    def _unfold_beam(self, x: Tensor, kv_bsz: int, beam: int, tgt_len: int) -> Tensor:
        x = x.reshape(kv_bsz, self.num_heads, beam, tgt_len, x.size(-1)).transpose(1, 2)
        return x.reshape(kv_bsz * beam, self.num_heads, tgt_len, x.size(-1))

    def _update_cache(self, saved_state: Dict[str, Tensor | None], k: Tensor | None,
                      v: Tensor | None, key_padding_mask: Tensor | None,
                      static_kv: bool, bsz: int):
        """Prepend the cached keys/values (stored (B, H, T, D), as fairseq stores them)."""
        if "prev_key" in saved_state:
            prev_key = saved_state["prev_key"]
            assert prev_key is not None
            k = prev_key if static_kv else torch.cat([prev_key, k], dim=2)
        if "prev_value" in saved_state:
            prev_value = saved_state["prev_value"]
            assert prev_value is not None
            v = prev_value if static_kv else torch.cat([prev_value, v], dim=2)
        assert k is not None and v is not None
        key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
            key_padding_mask=key_padding_mask,
            prev_key_padding_mask=saved_state.get("prev_key_padding_mask"),
            batch_size=k.size(0), src_len=k.size(2), static_kv=static_kv,
        )
        saved_state["prev_key"] = k
        saved_state["prev_value"] = v
        saved_state["prev_key_padding_mask"] = key_padding_mask
        return k, v, key_padding_mask

    def _raw_scores(self, q: Tensor, k: Tensor, v: Tensor, padding: Tensor | None,
                    blocked: Tensor | None) -> Tuple[Tensor, Tensor]:
        """``before_softmax``: q.k/sqrt(d) with blocked keys at -inf, as (B*H, Tq, Tk)."""
        if q.size(0) != k.size(0):
            raise ValueError("before_softmax is not supported with beam-shared encoder keys")
        scores = torch.matmul(q * self.scaling, k.transpose(-1, -2))
        if blocked is not None:
            scores = scores.masked_fill(blocked if blocked.dim() == 4 else blocked[None, None],
                                        float("-inf"))
        if padding is not None:
            scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        bh = q.size(0) * self.num_heads
        return scores.reshape(bh, q.size(2), k.size(2)), v.reshape(bh, v.size(2), -1)
