"""ReLU attention with the variance reduction factor, dense and in blocks of keys.

DESIGN.md §2.1. For query i with the set V(i) of keys it may see (not padding, not blocked by
the attention mask), n_i = |V(i)| and d the head size:

    s_ij  = ReLU(q_i . k_j / sqrt(d))            for j in V(i), else 0
    out_i = sum_j s_ij v_j / (gamma * sqrt(n_i / 2))

With x, v standard normal and independent, E[(ReLU(x) v)^2] = 1/2, so the sum of n terms has
variance n/2; the factor keeps the output variance independent of the length. gamma is a
temperature, a number or one value per head.

DESIGN.md §2.2, the per-row statistics the regularisers need. With S_i = sum_j s_ij,
p_ij = s_ij / S_i and T_i = sum_j s_ij log s_ij (0 log 0 = 0):

    H_i = -sum_j p_ij log p_ij = log S_i - T_i / S_i          (H_i := 0 when S_i = 0)

S_i and T_i are sums over keys, so they add up over blocks of keys: the chunked path never
holds an n x n matrix, in the forward pass or in the backward pass (which recomputes each
block's scores, the way memory-efficient attention does).

Masks zero scores; nothing adds -inf. Rows that see no key (n_i = 0) output 0 and divide by
max(n_i, 1). The log of an exact zero is never taken: ``log`` is evaluated at 1 wherever
s_ij = 0 or S_i = 0, so values and gradients stay finite.

Public functions (B batch, H heads, Tq queries, Tk keys, D head size; q, k, v are
``(B, H, T, D)``; ``key_padding_mask`` is ``(B, Tk)`` bool, True = padding; ``attn_mask`` is
bool, True = blocked, of shape ``(Tq, Tk)`` or ``(B|1, H|1, Tq, Tk)``):

    relu_attention(q, k, v, *, key_padding_mask=None, attn_mask=None, gamma=1.0,
                   key_chunk_size=0, dropout_p=0.0, need_weights=False,
                   need_statistics=False, query_padding_mask=None,
                   variance_reduction=True) -> AttentionResult
        The layer: out (B, H, Tq, D), weights (B, H, Tq, Tk) = s_ij / (gamma sqrt(n_i/2)),
        i.e. exactly the coefficients applied to v (None unless asked), statistics.
        ``key_chunk_size`` > 0 and < Tk selects the chunked path.
    relu_scores_dense(q, k, v, ...) / relu_scores_chunked(q, k, v, ..., key_chunk_size)
        -> (U, S, T): U = sum_j s_ij v_j (no factor), S and T as above (float32 or float64).
    count_visible_keys(key_padding_mask, attn_mask, tgt_len, src_len) -> n (B|1, H|1, Tq|1)
    variance_factor(n, gamma) -> 1 / (gamma * sqrt(max(n, 1) / 2))
    statistics_from_sums(S, T, zeros, n, valid, regularizable) -> AttentionStatistics
"""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union

import torch
import torch.nn.functional as F
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


def _xlogx_sum(s: Tensor) -> Tensor:
    """sum_j s_ij log s_ij over the last dim, in float32/64; 0 log 0 = 0 with finite gradient."""
    s = s.to(_stat_dtype(s))
    return (s * torch.log(torch.where(s > 0, s, torch.ones_like(s)))).sum(-1)


def relu_scores(q_scaled: Tensor, k: Tensor, visible: Tensor | None) -> Tensor:
    """s_ij = ReLU(q_i . k_j) with blocked keys zeroed; q already divided by sqrt(d)."""
    s = torch.relu(torch.matmul(q_scaled, k.transpose(-1, -2)))
    if visible is not None:
        s = s.masked_fill(~visible, 0.0)
    return s


def relu_scores_dense(q: Tensor, k: Tensor, v: Tensor, *,
                      key_padding_mask: Tensor | None = None,
                      attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                      need_sums: bool = True) -> Tuple[Tensor, Tensor | None,
                                                       Tensor | None, Tensor]:
    """(U, S, T, s) with the full (B, H, Tq, Tk) score matrix s; plain autograd."""
    s = relu_scores(q * q.size(-1) ** -0.5, k, visible_keys(key_padding_mask, attn_mask))
    dropped = F.dropout(s, p=dropout_p) if dropout_p > 0 else s
    u = torch.matmul(dropped, v)
    if not need_sums:
        return u, None, None, s
    return u, s.sum(-1, dtype=_stat_dtype(s)), _xlogx_sum(s), s


def _dropout_keep(shape: Tuple[int, ...], p: float, seed: int, block: int,
                  like: Tensor) -> Tensor:
    """The dropout multiplier of one key block, reproducible from (seed, block) for backward."""
    generator = torch.Generator(device=like.device)
    generator.manual_seed(seed + block)
    keep = torch.rand(shape, generator=generator, device=like.device) >= p
    return keep.to(like.dtype) / (1.0 - p)


class _ChunkedReLUAttention(torch.autograd.Function):
    """U, S, T over blocks of keys; backward recomputes each block (memory n x block)."""

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, attn_mask, chunk, dropout_p, seed, need_sums):
        ctx.set_materialize_grads(False)
        shape = q.shape[:-2] + (q.size(-2),)
        u = q.new_zeros(q.shape[:-1] + (v.size(-1),))
        stat_dtype = _stat_dtype(q)
        row_sum = q.new_zeros(shape, dtype=stat_dtype) if need_sums else None
        xlogx = q.new_zeros(shape, dtype=stat_dtype) if need_sums else None
        positives = q.new_zeros(shape, dtype=stat_dtype) if need_sums else None
        src_len = k.size(-2)
        for block, start in enumerate(range(0, src_len, chunk)):
            end = min(start + chunk, src_len)
            s = relu_scores(q, k[..., start:end, :], visible_keys(key_padding_mask, attn_mask,
                                                                   start, end))
            if need_sums:
                row_sum += s.sum(-1, dtype=stat_dtype)
                xlogx += _xlogx_sum(s)
                positives += (s > 0).sum(-1, dtype=stat_dtype)
            if dropout_p > 0:
                s = s * _dropout_keep(s.shape, dropout_p, seed, block, s)
            u += torch.matmul(s, v[..., start:end, :])
        ctx.save_for_backward(q, k, v, key_padding_mask, attn_mask)
        ctx.chunk, ctx.dropout_p, ctx.seed = chunk, dropout_p, seed
        if positives is not None:
            ctx.mark_non_differentiable(positives)
        return u, row_sum, xlogx, positives

    @staticmethod
    def backward(ctx, grad_u, grad_row_sum, grad_xlogx, _grad_positives):
        q, k, v, key_padding_mask, attn_mask = ctx.saved_tensors
        chunk, dropout_p, seed = ctx.chunk, ctx.dropout_p, ctx.seed
        grad_q = torch.zeros_like(q)
        grad_k = torch.zeros_like(k)
        grad_v = torch.zeros_like(v)
        src_len = k.size(-2)
        for block, start in enumerate(range(0, src_len, chunk)):
            end = min(start + chunk, src_len)
            k_b, v_b = k[..., start:end, :], v[..., start:end, :]
            z = torch.matmul(q, k_b.transpose(-1, -2))
            positive = z > 0
            visible = visible_keys(key_padding_mask, attn_mask, start, end)
            if visible is not None:
                positive = positive & visible
            s = torch.where(positive, z, torch.zeros_like(z))
            grad_s = torch.zeros_like(z)
            if grad_u is not None:
                keep = (_dropout_keep(s.shape, dropout_p, seed, block, s)
                        if dropout_p > 0 else None)
                grad_s = torch.matmul(grad_u, v_b.transpose(-1, -2))
                s_dropped = s if keep is None else s * keep
                if keep is not None:
                    grad_s = grad_s * keep
                grad_v[..., start:end, :] = torch.matmul(s_dropped.transpose(-1, -2), grad_u)
            if grad_row_sum is not None:
                grad_s = grad_s + grad_row_sum.to(z.dtype).unsqueeze(-1)
            if grad_xlogx is not None:
                log_s = torch.log(torch.where(positive, s, torch.ones_like(s)))
                grad_s = grad_s + grad_xlogx.to(z.dtype).unsqueeze(-1) * (log_s + 1)
            grad_z = torch.where(positive, grad_s, torch.zeros_like(grad_s))
            grad_q += torch.matmul(grad_z, k_b)
            grad_k[..., start:end, :] = torch.matmul(grad_z.transpose(-1, -2), q)
        return grad_q, grad_k, grad_v, None, None, None, None, None, None


def relu_scores_chunked(q: Tensor, k: Tensor, v: Tensor, *, key_chunk_size: int,
                        key_padding_mask: Tensor | None = None,
                        attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                        need_sums: bool = True) -> Tuple[Tensor, Tensor | None,
                                                         Tensor | None, Tensor | None]:
    """(U, S, T, P) over blocks of ``key_chunk_size`` keys; P counts positive scores per row.

    q, k, v share their (B, H) dims. Without ``need_sums`` only U is computed.
    """
    if key_chunk_size <= 0:
        raise ValueError(f"key_chunk_size must be > 0, got {key_chunk_size}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError("the chunked path needs q and k with the same (B, H) dims, "
                         f"got {tuple(q.shape)} and {tuple(k.shape)}")
    seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    attn_mask = as_4d_mask(attn_mask)
    return _ChunkedReLUAttention.apply(
        q * q.size(-1) ** -0.5, k, v, key_padding_mask, attn_mask, int(key_chunk_size),
        float(dropout_p), seed, need_sums,
    )


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
                   variance_reduction: bool = True) -> AttentionResult:
    """ReLU attention of §2.1 with statistics of §2.2; dense, or chunked over keys.

    ``dropout_p`` drops score entries before the values are summed (pass 0 in evaluation);
    the statistics and returned weights are those of the undropped scores.
    ``query_padding_mask`` (B, Tq) only excludes padded queries from the statistics.
    ``variance_reduction=False`` drops the 1/(gamma sqrt(n/2)) factor (for the ablation).
    """
    batch, heads, tgt_len, _ = q.shape
    src_len = k.size(-2)
    n = count_visible_keys(key_padding_mask, attn_mask, tgt_len, src_len)
    n = n.to(device=q.device, dtype=_stat_dtype(q))
    chunked = 0 < key_chunk_size < src_len
    if chunked:
        u, row_sum, xlogx, positives = relu_scores_chunked(
            q, k, v, key_chunk_size=key_chunk_size, key_padding_mask=key_padding_mask,
            attn_mask=attn_mask, dropout_p=dropout_p, need_sums=need_statistics)
        s = None
    else:
        u, row_sum, xlogx, s = relu_scores_dense(
            q, k, v, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
            dropout_p=dropout_p, need_sums=need_statistics)
        positives = (s > 0).sum(-1, dtype=n.dtype) if need_statistics else None
    factor = variance_factor(n, gamma) if variance_reduction else torch.ones_like(n)
    out = u * factor.unsqueeze(-1).to(u.dtype)

    weights = None
    if need_weights:
        if s is None:
            with torch.no_grad():
                s = relu_scores(q * q.size(-1) ** -0.5, k,
                                visible_keys(key_padding_mask, attn_mask))
        weights = s * factor.unsqueeze(-1).to(s.dtype)

    statistics = None
    if need_statistics:
        n_rows, valid = row_validity(n, (batch, heads, tgt_len), query_padding_mask)
        statistics = statistics_from_sums(row_sum, xlogx, n_rows - positives, n_rows, valid,
                                          regularizable=True)
    return AttentionResult(out, weights, statistics)

