"""What every ReLU attention backend shares: result types, masks, the variance factor, helpers.

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", ReLU attention
with variance reduction; equations restated in docs/relu_former.md). For query i with the set
V(i) of keys it may see (not padding, not blocked by the attention mask), n_i = |V(i)|, d the
head size and s_ij = ReLU(q_i . k_j / sqrt(d)) for j in V(i) (else 0), every backend returns
the sums

    U_i = sum_j s_ij v_j,  S_i = sum_j s_ij,  T_i = sum_j s_ij log s_ij,  P_i = #{j: s_ij > 0}

as a ``ReLUSums``; the layer divides U by gamma sqrt(n_i / 2) (``variance_factor``, eq. of
section 4.1). The backends (reference.py, tiled.py, flex.py) import only this module, and
``dispatch.py`` picks one of them.

Masks: ``key_padding_mask`` (B, Tk) bool, True = padding; ``attn_mask`` bool, True = blocked,
(Tq, Tk) or (B|1, H|1, Tq, Tk). Masks zero scores; nothing adds -inf.

NaN and inf: a NaN score is kept by ReLU (it is not <= 0) and is a NaN in U, S, T and P and in
the gradient of its entry (``relu_backward``), on every backend, so a model that diverged
shows it; a hidden entry is 0 whatever q and k hold there.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union

import torch
from torch import Tensor

Gamma = Union[float, Tensor]


class ReLUSums(NamedTuple):
    """U (B, H, Tq, D); S, T, P (B, H, Tq) or None; s (B, H, Tq, Tk, dense reference) or None."""

    u: Tensor
    row_sum: Tensor | None
    xlogx: Tensor | None
    positives: Tensor | None
    scores: Tensor | None


class AttentionStatistics(NamedTuple):
    """Per-row figures of one attention call, each ``(B, H, Tq)``.

    row_sum: S_i (for normalised activations 1); entropy: H_i of the row's normalised weights;
    zeros: how many of the n_i visible keys got weight 0; n: n_i; valid: rows that are real
    queries and see at least one key; regularizable: whether the regularisers of section 4.2
    apply (ReLU attention; then row_sum and entropy carry gradients).
    """

    row_sum: Tensor
    entropy: Tensor
    zeros: Tensor
    n: Tensor
    valid: Tensor
    regularizable: bool


class AttentionResult(NamedTuple):
    out: Tensor
    weights: Tensor | None
    statistics: AttentionStatistics | None


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """One shape check for every backend: q, k, v share (B, H); k and v share their keys."""
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError("q, k and v need the same (B, H) dims and k, v the same keys, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")


def as_4d_mask(attn_mask: Tensor | None) -> Tensor | None:
    """A (Tq, Tk) or (B|1, H|1, Tq, Tk) bool mask as a 4-d view."""
    if attn_mask is None:
        return None
    if attn_mask.dtype != torch.bool:
        raise TypeError(f"attn_mask must be bool (True = blocked), got {attn_mask.dtype}")
    if attn_mask.dim() == 2:
        return attn_mask[None, None]
    if attn_mask.dim() == 4:
        return attn_mask
    raise ValueError(f"attn_mask must be 2-d or 4-d, got shape {tuple(attn_mask.shape)}")


def visible_keys(key_padding_mask: Tensor | None, attn_mask: Tensor | None,
                 start: int = 0, end: int | None = None) -> Tensor | None:
    """Bool (B|1, H|1, Tq|1, end-start): True where query i may see key j; None = all."""
    visible = None
    if key_padding_mask is not None:
        visible = ~key_padding_mask[:, None, None, start:end]
    attn_mask = as_4d_mask(attn_mask)
    if attn_mask is not None:
        allowed = ~attn_mask[..., start:end]
        visible = allowed if visible is None else visible & allowed
    return visible


def count_visible_keys(key_padding_mask: Tensor | None, attn_mask: Tensor | None,
                       tgt_len: int, src_len: int) -> Tensor:
    """n_i as a float tensor of shape (B|1, H|1, Tq|1), without building a B x Tq x Tk mask.

    The count is a product of the two masks, so it is one small matmul.
    """
    attn_mask = as_4d_mask(attn_mask)
    device = (key_padding_mask if key_padding_mask is not None else attn_mask)
    device = device.device if device is not None else None
    if key_padding_mask is None and attn_mask is None:
        return torch.full((1, 1, 1), float(src_len), device=device)
    if attn_mask is None:
        return (~key_padding_mask).sum(-1, dtype=torch.float32)[:, None, None]
    allowed = (~attn_mask).float()  # (B|1, H|1, Tq, Tk)
    if key_padding_mask is None:
        return allowed.sum(-1)
    keys = (~key_padding_mask).float()[:, None, :, None]  # (B, 1, Tk, 1)
    return torch.matmul(allowed, keys).squeeze(-1)


def variance_factor(n: Tensor, gamma: Gamma = 1.0) -> Tensor:
    """1 / (gamma sqrt(max(n_i, 1) / 2)), ReLUFormer section 4.1; gamma scalar or (H,).

    n has shape (B|1, H|1, Tq|1). With x, v standard normal, E[(ReLU(x) v)^2] = 1/2, so a sum
    of n such terms has variance n/2: the factor keeps the output variance length-free.
    """
    factor = torch.rsqrt(n.clamp(min=1) / 2)
    if isinstance(gamma, Tensor):
        return factor / gamma.to(factor.dtype).view(1, -1, 1)
    return factor / gamma


def stat_dtype(x: Tensor) -> torch.dtype:
    """The dtype statistics are accumulated in: float64 for float64 input, else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def safe_log(s: Tensor) -> Tensor:
    """log(s + tiny) for s >= 0, in float32 for half precision (float64 stays float64).

    Finite everywhere, so s * log s is exactly 0 where s = 0 (0 log 0 = 0, finite gradients).
    Adding the smallest normal number rather than masking the zeros keeps the CPU kernels
    branch-free: log of an exact 0 and masks over ReLU's random zero pattern are many times
    slower. In float32 tiny (1e-38) is negligible against any positive score.
    """
    if s.dtype in (torch.float16, torch.bfloat16):
        s = s.float()
    return torch.log(s + torch.finfo(s.dtype).tiny)


def xlogx_sum(s: Tensor) -> Tensor:
    """T_i = sum_j s_ij log s_ij over the last dim, in ``stat_dtype``, with 0 log 0 = 0."""
    s = s.to(stat_dtype(s))
    return (s * safe_log(s)).sum(-1)


def count_positive(s: Tensor, dtype: torch.dtype) -> Tensor:
    """P_i: how many entries of each row of s >= 0 are positive; NaN where one is NaN
    (``torch.sign`` would count a NaN as 0)."""
    return torch.where(s > 0, 1.0, s).sum(-1, dtype=dtype)


def relu_backward(grad_s: Tensor, s: Tensor) -> Tensor:
    """ReLU's and the masks' derivative applied to ``grad_s`` in place: it flows where
    s > 0, is 0 where s = 0 and NaN where s is NaN (``threshold_backward`` and a product with
    ``sign(s)`` would let a finite gradient through there, or none)."""
    return torch.where(s > 0, grad_s, s, out=grad_s)


def dropout_keep(shape: Tuple[int, ...], p: float, seed: int, block: int,
                 like: Tensor) -> Tensor:
    """The dropout multiplier of one block/tile, reproducible from (seed, block) for backward.

    Drawn in float32 whatever the dtype of ``like``, so every backend and dtype drops the same
    entries for the same (seed, block).
    """
    generator = torch.Generator(device=like.device)
    generator.manual_seed(seed + block)
    keep = torch.rand(shape, generator=generator, device=like.device,
                      dtype=torch.float32) >= p
    return keep.to(like.dtype).div_(1.0 - p)


def dropout_seed(dropout_p: float, seed: int | None) -> int:
    """The seed a backend replays its dropout masks from: ``seed``, or a fresh one."""
    if seed is not None:
        return int(seed)
    return int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
