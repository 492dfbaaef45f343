"""ReLU attention with the variance reduction factor: fused (default), dense or in key blocks.

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", ReLU attention
with variance reduction; equations restated in docs/relu_former.md). For query i with the set
V(i) of keys it may see (not padding, not blocked by the attention mask), n_i = |V(i)| and d
the head size:

    s_ij  = ReLU(q_i . k_j / sqrt(d))            for j in V(i), else 0
    out_i = sum_j s_ij v_j / (gamma * sqrt(n_i / 2))

With x, v standard normal and independent, E[(ReLU(x) v)^2] = 1/2, so the sum of n terms has
variance n/2; the factor keeps the output variance independent of the length. gamma is a
temperature, a number or one value per head.

The per-row statistics the regularisers need (docs/relu_former.md). With S_i = sum_j s_ij,
p_ij = s_ij / S_i and T_i = sum_j s_ij log s_ij (0 log 0 = 0):

    H_i = -sum_j p_ij log p_ij = log S_i - T_i / S_i          (H_i := 0 when S_i = 0)

S_i and T_i are sums over keys, so they add up over blocks of keys: the chunked path never
holds an n x n matrix, in the forward pass or in the backward pass (which recomputes each
block's scores, the way memory-efficient attention does). The fused kernel
(``relu_former.relu_attention.kernels.tiled``) tiles queries as well, so it holds neither
Tq x Tk nor Tq x block; it is the default of ``relu_attention`` (``fused=True``), and the
dense and chunked paths stay as references (``fused=False``).

Masks zero scores; nothing adds -inf. Rows that see no key (n_i = 0) output 0 and divide by
max(n_i, 1). s log s is evaluated as s log(s + tiny), so 0 log 0 = 0 with finite
gradients; H_i uses log S_i only where S_i > 0; every entry with s_ij = 0 gets gradient 0.

Public functions (B batch, H heads, Tq queries, Tk keys, D head size; q, k, v are
``(B, H, T, D)``; ``key_padding_mask`` is ``(B, Tk)`` bool, True = padding; ``attn_mask`` is
bool, True = blocked, of shape ``(Tq, Tk)`` or ``(B|1, H|1, Tq, Tk)``):

    relu_attention(q, k, v, *, key_padding_mask=None, attn_mask=None, gamma=1.0,
                   key_chunk_size=0, dropout_p=0.0, need_weights=False,
                   need_statistics=False, query_padding_mask=None,
                   variance_reduction=True, fused=True) -> AttentionResult
        The layer: out (B, H, Tq, D), weights (B, H, Tq, Tk) = s_ij / (gamma sqrt(n_i/2)),
        i.e. exactly the coefficients applied to v (None unless asked), statistics.
        ``fused`` selects the fused kernel; otherwise ``key_chunk_size`` > 0 and < Tk
        selects the chunked path, else the dense one.
    relu_sums(q, k, v, *, key_chunk_size=0, key_padding_mask=None, attn_mask=None,
              dropout_p=0.0, need_sums=True) -> ReLUSums(u, row_sum, xlogx, positives, scores)
        The sums without the factor: U = sum_j s_ij v_j, S, T (float32, float64 for float64
        input), P = #positive scores per row, and s itself on the dense path. Written
        forward/backward (one matmul for scores, ReLU, one matmul for values); the chunked
        backward recomputes each block.
    count_visible_keys(key_padding_mask, attn_mask, tgt_len, src_len) -> n (B|1, H|1, Tq|1)
    variance_factor(n, gamma) -> 1 / (gamma * sqrt(max(n, 1) / 2))
    statistics_from_sums(S, T, zeros, n, valid, regularizable) -> AttentionStatistics
"""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union

import torch
from torch import Tensor

Gamma = Union[float, Tensor]


class AttentionStatistics(NamedTuple):
    """Per-row figures of one attention call, each ``(B, H, Tq)``.

    row_sum: S_i (for normalised activations 1); entropy: H_i of the row's normalised weights;
    zeros: how many of the n_i visible keys got weight 0; n: n_i; valid: rows that are real
    queries and see at least one key; regularizable: whether the regularisers of §2.2 apply
    (ReLU attention; then row_sum and entropy carry gradients).
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
    """1 / (gamma * sqrt(n_i / 2)) for n of shape (B|1, H|1, Tq|1); gamma scalar or (H,)."""
    factor = torch.rsqrt(n.clamp(min=1) / 2)
    if isinstance(gamma, Tensor):
        return factor / gamma.to(factor.dtype).view(1, -1, 1)
    return factor / gamma


def _stat_dtype(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def xlogx_sum(s: Tensor) -> Tensor:
    """sum_j s_ij log s_ij over the last dim in float32/64 for s >= 0, with 0 log 0 = 0."""
    s = s.to(_stat_dtype(s))
    return (s * _safe_log(s)).sum(-1)


def _safe_log(s: Tensor) -> Tensor:
    """log(s + tiny) for s >= 0: finite everywhere, so s * log s is exactly 0 where s = 0.

    Adding the smallest normal number (rather than masking the zeros) keeps the CPU kernels
    branch-free: log of an exact 0 and masks over ReLU's random zero pattern are many times
    slower. Half precision is evaluated in float32, where tiny is negligible.
    """
    if s.dtype in (torch.float16, torch.bfloat16):
        return torch.log(s.float() + torch.finfo(torch.float32).tiny).to(s.dtype)
    return torch.log(s + torch.finfo(s.dtype).tiny)


def count_positive(s: Tensor, dtype: torch.dtype) -> Tensor:
    """How many entries of each row of s >= 0 are positive (sign is 0 or 1 here)."""
    return torch.sign(s).sum(-1, dtype=dtype)


def relu_scores(q_scaled: Tensor, k: Tensor, visible: Tensor | None) -> Tensor:
    """s_ij = ReLU(q_i . k_j) with blocked keys zeroed; q already divided by sqrt(d)."""
    s = torch.matmul(q_scaled, k.transpose(-1, -2)).relu_()
    if visible is not None:
        s = s.masked_fill_(~visible, 0.0)
    return s


def _dropout_keep(shape: Tuple[int, ...], p: float, seed: int, block: int,
                  like: Tensor) -> Tensor:
    """The dropout multiplier of one key block, reproducible from (seed, block) for backward."""
    generator = torch.Generator(device=like.device)
    generator.manual_seed(seed + block)
    keep = torch.rand(shape, generator=generator, device=like.device) >= p
    return keep.to(like.dtype) / (1.0 - p)


class _ReLUAttentionSums(torch.autograd.Function):
    """U = s v, S, T and the positive counts P, over blocks of keys, with a written backward.

    One block (dense): s is kept for backward, like softmax keeps its probabilities. Several
    blocks (chunked): only q, k, v are kept and backward recomputes each block's scores, so
    memory is n x block. Backward of a block, with g the incoming gradients:

        dL/ds_ij = gU_i . v_j + gS_i + gT_i (log s_ij + 1)      (where s_ij > 0, else 0)
        dq_i = sum_j dL/ds_ij k_j,  dk_j = sum_i dL/ds_ij q_i,  dv_j = sum_i s_ij gU_i

    Dropout masks are drawn from a generator seeded per block and replayed in backward.
    """

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, attn_mask, chunk, dropout_p, seed, need_sums):
        ctx.set_materialize_grads(False)
        src_len = k.size(-2)
        single = chunk >= src_len
        rows = q.shape[:-1]
        stat_dtype = _stat_dtype(q)
        u = None
        row_sum = xlogx = positives = None
        if need_sums:
            row_sum, xlogx, positives = (q.new_zeros(rows, dtype=stat_dtype) for _ in range(3))
        s = None
        for block, start in enumerate(range(0, src_len, chunk)):
            end = min(start + chunk, src_len)
            s = relu_scores(q, k[..., start:end, :],
                            visible_keys(key_padding_mask, attn_mask, start, end))
            if need_sums:
                row_sum += s.sum(-1, dtype=stat_dtype)
                xlogx += xlogx_sum(s)
                positives += count_positive(s, stat_dtype)
            dropped = s * _dropout_keep(s.shape, dropout_p, seed, block, s) if dropout_p else s
            part = torch.matmul(dropped, v[..., start:end, :])
            u = part if u is None else u.add_(part)
        if u is None:  # no key at all
            u = q.new_zeros(rows + (v.size(-1),))
        scores = s if single else None
        ctx.save_for_backward(q, k, v, key_padding_mask, attn_mask, scores)
        ctx.chunk, ctx.dropout_p, ctx.seed = chunk, dropout_p, seed
        if positives is not None:
            ctx.mark_non_differentiable(positives)
        return u, row_sum, xlogx, positives, scores

    @staticmethod
    def backward(ctx, grad_u, grad_row_sum, grad_xlogx, _grad_positives, grad_scores):
        q, k, v, key_padding_mask, attn_mask, scores = ctx.saved_tensors
        chunk, dropout_p, seed = ctx.chunk, ctx.dropout_p, ctx.seed
        src_len = k.size(-2)
        grad_q = torch.zeros_like(q)
        grad_k = torch.zeros_like(k)
        grad_v = torch.zeros_like(v)
        for block, start in enumerate(range(0, src_len, chunk)):
            end = min(start + chunk, src_len)
            k_b, v_b = k[..., start:end, :], v[..., start:end, :]
            s = scores if scores is not None else relu_scores(
                q, k_b, visible_keys(key_padding_mask, attn_mask, start, end))
            grad_s = None
            if grad_u is not None:
                grad_s = torch.matmul(grad_u, v_b.transpose(-1, -2))
                if dropout_p:
                    keep = _dropout_keep(s.shape, dropout_p, seed, block, s)
                    grad_s.mul_(keep)
                    grad_v[..., start:end, :] = torch.matmul((s * keep).transpose(-1, -2),
                                                             grad_u)
                else:
                    grad_v[..., start:end, :] = torch.matmul(s.transpose(-1, -2), grad_u)
            if grad_s is None:
                grad_s = torch.zeros_like(s)
            if grad_scores is not None:  # dense only: the returned s was used downstream
                grad_s.add_(grad_scores)
            # per-row terms: gS_i + gT_i (log s_ij + 1) = gT_i log s_ij + (gS_i + gT_i)
            shift = grad_row_sum
            if grad_xlogx is not None:
                grad_t = grad_xlogx.to(s.dtype).unsqueeze(-1)
                grad_s.addcmul_(_safe_log(s), grad_t)
                shift = grad_xlogx if shift is None else shift + grad_xlogx
            if shift is not None:
                grad_s.add_(shift.to(s.dtype).unsqueeze(-1))
            grad_s.mul_(torch.sign(s))  # ReLU's and the masks' derivative: 0 where s = 0
            grad_q.add_(torch.matmul(grad_s, k_b))
            grad_k[..., start:end, :] = torch.matmul(grad_s.transpose(-1, -2), q)
        return grad_q, grad_k, grad_v, None, None, None, None, None, None


class ReLUSums(NamedTuple):
    """U = sum_j s_ij v_j (B, H, Tq, D); S, T, P (B, H, Tq) or None; s (dense only) or None."""

    u: Tensor
    row_sum: Tensor | None
    xlogx: Tensor | None
    positives: Tensor | None
    scores: Tensor | None


def relu_sums(q: Tensor, k: Tensor, v: Tensor, *, key_chunk_size: int = 0,
              key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
              dropout_p: float = 0.0, need_sums: bool = True) -> ReLUSums:
    """The sums of §2.1-2.2 without the variance factor, dense or over blocks of keys.

    ``key_chunk_size`` 0 or >= Tk: dense, and ``scores`` is the (B, H, Tq, Tk) matrix s
    (differentiable, e.g. for an alignment loss on the weights). q, k and v must share their
    (B, H) dims. Without ``need_sums`` only U is computed (S, T, P are None).
    """
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError("q, k and v need the same (B, H) dims and k, v the same keys, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    src_len = k.size(-2)
    chunk = key_chunk_size if 0 < key_chunk_size < src_len else max(src_len, 1)
    seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    return ReLUSums(*_ReLUAttentionSums.apply(
        q * q.size(-1) ** -0.5, k, v, key_padding_mask, as_4d_mask(attn_mask), int(chunk),
        float(dropout_p), seed, need_sums,
    ))


def any_relu_sums(q: Tensor, k: Tensor, v: Tensor, *, fused: bool | str,
                  key_chunk_size: int = 0,
                  key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
                  dropout_p: float = 0.0, need_sums: bool = True) -> ReLUSums:
    """``fused_relu_sums`` when ``fused``, else ``relu_sums`` (the dense/chunked reference).

    Callers that return weights with gradient (``need_weights`` while grad is enabled) pass
    ``fused=False``: those weights are the dense matrix anyway, e.g. for an alignment loss.
    A string ``fused`` names the fused backend (``tiled.FUSED_BACKENDS``); True = auto.
    """
    if not fused:
        return relu_sums(q, k, v, key_chunk_size=key_chunk_size,
                         key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                         dropout_p=dropout_p, need_sums=need_sums)
    # imported here: the fused module builds on this one's masks and result types
    from relu_former.relu_attention.kernels.tiled import fused_relu_sums

    return fused_relu_sums(q, k, v, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                           dropout_p=dropout_p, need_sums=need_sums,
                           backend=fused if isinstance(fused, str) else "auto")


def statistics_from_sums(row_sum: Tensor, xlogx: Tensor, zeros: Tensor, n: Tensor,
                         valid: Tensor, regularizable: bool) -> AttentionStatistics:
    """H_i = log S_i - T_i / S_i (0 where S_i = 0) and the figures of ``AttentionStatistics``."""
    positive = row_sum > 0
    safe = torch.where(positive, row_sum, torch.ones_like(row_sum))
    entropy = torch.where(positive, torch.log(safe) - xlogx / safe, torch.zeros_like(safe))
    if not regularizable:
        row_sum, entropy = row_sum.detach(), entropy.detach()
    return AttentionStatistics(row_sum, entropy, zeros, n, valid, regularizable)


def row_validity(n: Tensor, shape: Tuple[int, int, int],
                 query_padding_mask: Tensor | None) -> Tuple[Tensor, Tensor]:
    """(n, valid) broadcast to (B, H, Tq): rows that are real queries with n_i > 0."""
    n = n.expand(shape)
    valid = n > 0
    if query_padding_mask is not None:
        valid = valid & ~query_padding_mask[:, None, :]
    return n, valid


def relu_attention(q: Tensor, k: Tensor, v: Tensor, *,
                   key_padding_mask: Tensor | None = None,
                   attn_mask: Tensor | None = None, gamma: Gamma = 1.0,
                   key_chunk_size: int = 0, dropout_p: float = 0.0,
                   need_weights: bool = False, need_statistics: bool = False,
                   query_padding_mask: Tensor | None = None,
                   variance_reduction: bool = True, fused: bool = True) -> AttentionResult:
    """ReLU attention with its statistics (module docstring); fused, dense or chunked.

    ``dropout_p`` drops score entries before the values are summed (pass 0 in evaluation);
    the statistics and returned weights are those of the undropped scores.
    ``query_padding_mask`` (B, Tq) only excludes padded queries from the statistics.
    ``variance_reduction=False`` drops the 1/(gamma sqrt(n/2)) factor (for the ablation).
    ``fused`` (default) uses the fused kernel, which ignores ``key_chunk_size``. Weights asked
    for while grad is enabled come from the reference path (dense: with gradients, e.g. for an
    alignment loss); without grad they are recomputed after the fused pass.
    """
    batch, heads, tgt_len, _ = q.shape
    src_len = k.size(-2)
    n = count_visible_keys(key_padding_mask, attn_mask, tgt_len, src_len)
    n = n.to(device=q.device, dtype=_stat_dtype(q))
    fused = fused and not (need_weights and torch.is_grad_enabled())
    sums = any_relu_sums(q, k, v, fused=fused, key_chunk_size=key_chunk_size,
                         key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                         dropout_p=dropout_p, need_sums=need_statistics)
    u, s = sums.u, sums.scores
    factor = variance_factor(n, gamma) if variance_reduction else torch.ones_like(n)
    out = u * factor.unsqueeze(-1).to(u.dtype)

    weights = None
    if need_weights:
        if s is None:  # chunked: the weights are recomputed, without gradient
            with torch.no_grad():
                s = relu_scores(q * q.size(-1) ** -0.5, k,
                                visible_keys(key_padding_mask, attn_mask))
        weights = s * factor.unsqueeze(-1).to(s.dtype)

    statistics = None
    if need_statistics:
        n_rows, valid = row_validity(n, (batch, heads, tgt_len), query_padding_mask)
        statistics = statistics_from_sums(sums.row_sum, sums.xlogx, n_rows - sums.positives,
                                          n_rows, valid, regularizable=True)
    return AttentionResult(out, weights, statistics)

