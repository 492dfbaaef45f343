"""The reference backend: ReLU attention sums dense, or over blocks of keys (``key_chunk_size``).

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", section 4.1; the
equations in docs/relu_former.md). With s_ij = ReLU(q_i . k_j / sqrt(d)) over the visible keys,

    U_i = sum_j s_ij v_j,   S_i = sum_j s_ij,   T_i = sum_j s_ij log s_ij,   P_i = #{s_ij > 0}

(the entropy H_i = log S_i - T_i / S_i is formed by ``relu_former.relu_attention.regularisers``).
S_i and T_i are sums over keys, so they add up over blocks of keys: the chunked path never
holds an n x n matrix, in the forward pass or in the backward pass (which recomputes each
block's scores, the way memory-efficient attention does). The dense path (one block) also
returns s itself, with gradient, for a loss on the weights. It is the float64-checked
reference the other backends are compared with; ``tiled`` is the CPU default.

s log s is evaluated as s log(s + tiny), so 0 log 0 = 0 with finite gradients; every entry
with s_ij = 0 gets gradient 0.

Public:

    reference_relu_sums(q, k, v, *, key_padding_mask=None, attn_mask=None, dropout_p=0.0,
                        seed=None, need_sums=True, key_chunk_size=0) -> ReLUSums
    relu_scores(q_scaled, k, visible) -> s (B, H, Tq, Tk)
"""

from __future__ import annotations

import torch
from torch import Tensor

from relu_former.relu_attention.kernels.common import (
    ReLUSums,
    as_4d_mask,
    check_qkv,
    count_positive,
    dropout_keep,
    dropout_seed,
    relu_backward,
    safe_log,
    stat_dtype,
    visible_keys,
    xlogx_sum,
)


def relu_scores(q_scaled: Tensor, k: Tensor, visible: Tensor | None) -> Tensor:
    """s_ij = ReLU(q_i . k_j) with blocked keys zeroed; q already divided by sqrt(d)."""
    s = torch.matmul(q_scaled, k.transpose(-1, -2)).relu_()
    if visible is not None:
        s = s.masked_fill_(~visible, 0.0)
    return s


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
        sums_dtype = stat_dtype(q)
        u = None
        row_sum = xlogx = positives = None
        if need_sums:
            row_sum, xlogx, positives = (q.new_zeros(rows, dtype=sums_dtype) for _ in range(3))
        s = None
        for block, start in enumerate(range(0, src_len, chunk)):
            end = min(start + chunk, src_len)
            s = relu_scores(q, k[..., start:end, :],
                            visible_keys(key_padding_mask, attn_mask, start, end))
            if need_sums:
                row_sum += s.sum(-1, dtype=sums_dtype)
                xlogx += xlogx_sum(s)
                positives += count_positive(s, sums_dtype)
            dropped = s * dropout_keep(s.shape, dropout_p, seed, block, s) if dropout_p else s
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
                    keep = dropout_keep(s.shape, dropout_p, seed, block, s)
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
                grad_s.addcmul_(safe_log(s), grad_t)
                shift = grad_xlogx if shift is None else shift + grad_xlogx
            if shift is not None:
                grad_s.add_(shift.to(s.dtype).unsqueeze(-1))
            relu_backward(grad_s, s)  # 0 where s = 0, NaN where s is NaN
            grad_q.add_(torch.matmul(grad_s, k_b))
            grad_k[..., start:end, :] = torch.matmul(grad_s.transpose(-1, -2), q)
        return grad_q, grad_k, grad_v, None, None, None, None, None, None


def reference_relu_sums(q: Tensor, k: Tensor, v: Tensor, *,
                        key_padding_mask: Tensor | None = None,
                        attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                        seed: int | None = None, need_sums: bool = True,
                        key_chunk_size: int = 0) -> ReLUSums:
    """The sums U, S, T, P of the module docstring, dense or over blocks of keys.

    ``key_chunk_size`` 0 or >= Tk: dense, and ``scores`` is the (B, H, Tq, Tk) matrix s
    (differentiable, e.g. for an alignment loss on the weights). Without ``need_sums`` only U
    is computed (S, T, P are None). ``seed`` replays the dropout masks (None: a fresh one).
    """
    check_qkv(q, k, v)
    if key_chunk_size is None or int(key_chunk_size) != key_chunk_size or key_chunk_size < 0:
        raise ValueError(f"key_chunk_size must be an integer >= 0, got {key_chunk_size}")
    src_len = k.size(-2)
    chunk = key_chunk_size if 0 < key_chunk_size < src_len else max(src_len, 1)
    return ReLUSums(*_ReLUAttentionSums.apply(
        q * q.size(-1) ** -0.5, k, v, key_padding_mask, as_4d_mask(attn_mask), int(chunk),
        float(dropout_p), dropout_seed(dropout_p, seed), need_sums,
    ))
