"""The tiled backend: fused ReLU attention in tiles of queries x keys, nothing Tq x Tk kept.

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", ReLU attention with
variance reduction): with s_ij = ReLU(q_i . k_j / sqrt(d)) over the keys j that query i may see
and n_i their number,

    U_i = sum_j s_ij v_j,   S_i = sum_j s_ij,   T_i = sum_j s_ij log s_ij,   P_i = #{j: s_ij > 0}
    out_i = U_i / (gamma sqrt(n_i / 2)),   H_i = log S_i - T_i / S_i

Every one of these is a plain sum over keys: unlike softmax, a tile of keys needs no running
maximum, no exponential and no rescaling of what earlier tiles summed (flash attention's
bookkeeping). So the forward pass walks over tiles of (query block x key block), computes the
tile's scores with one matrix product, and adds the tile's share to U, S, T, P; the backward
pass recomputes each tile's scores the same way and, with gU, gS, gT the incoming gradients,

    dL/ds_ij = gU_i . v_j + gS_i + gT_i (log s_ij + 1)          where s_ij > 0, else 0
    dq_i += sum_j dL/ds_ij k_j / sqrt(d),  dk_j += sum_i dL/ds_ij q_i / sqrt(d),
    dv_j += sum_i s_ij gU_i

Peak memory is therefore O((Tq + Tk) d) plus one tile, in both passes. Tiles are large (up
to 1 MiB) so the time goes to the two (forward) and five (backward) matrix products; tiles the
mask blocks completely are skipped (half the tiles of causal self-attention), and tiles it
does not touch are not masked at all. Terms whose incoming gradient is None (e.g. the
statistics when no regulariser uses them) cost nothing in backward.

Why an ``autograd.Function`` over torch matrix products and not a C++ extension: measured
with ``scripts/benchmarks/bench_attention.py`` (case ``relu_matmuls``; docs/relu_former.md,
"Fused ReLU attention"), the tiles' matrix products alone take over 90% of the kernel's time,
and they run in the same BLAS either way; a C++ loop could only trim the rest (ReLU, the
statistics, tens of microseconds of Python a tile), at the cost of a compiler in every install.

Masks are those of ``relu_former.relu_attention.kernels.common``: ``key_padding_mask``
(B, Tk) bool, True = padding; ``attn_mask`` bool, True = blocked, (Tq, Tk) or
(B|1, H|1, Tq, Tk). Dropout drops score entries before the values are summed, with a mask
drawn per tile from a
generator seeded from (seed, tile) and replayed in backward. Statistics are accumulated in
float32 (float64 for float64 input); bf16/fp16 outputs are accumulated in float32 too.

Public:

    tiled_relu_sums(q, k, v, *, key_padding_mask=None, attn_mask=None, dropout_p=0.0,
                    seed=None, need_sums=True, tile_elements=TILE_ELEMENTS,
                    key_block=KEY_BLOCK)
        -> ReLUSums(u, row_sum, xlogx, positives, scores=None); the contract of every backend
        (``relu_former.relu_attention.kernels.dispatch``).
    tile_shape(batch_heads, tgt_len, src_len, tile_elements, key_block) -> (bq, bk)
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

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
)

# One tile holds at most this many scores (all heads of a batch slice): 1 MiB in float32,
# large enough that the matrix products dominate, small enough to stay in the caches.
# Measured (1 thread, forward + backward with statistics): 4 heads x 256 queries x 256 keys
# ran 4-14% faster than 128 x 512 and than tiles of half or 4 times the size, at head size
# 128 without a mask and at head size 64 with and without a causal mask.
TILE_ELEMENTS = 2**18
# Keys per tile when the whole row does not fit in a tile.
KEY_BLOCK = 256
# Fewest queries in a tile: below that, split the batch instead.
MIN_QUERY_BLOCK = 32


def tile_shape(batch_heads: int, tgt_len: int, src_len: int,
               tile_elements: int = TILE_ELEMENTS, key_block: int = KEY_BLOCK) -> tuple[int, int]:
    """(queries, keys) per tile so that ``batch_heads * bq * bk <= tile_elements`` if it can."""
    src_len, tgt_len = max(src_len, 1), max(tgt_len, 1)
    if batch_heads * tgt_len * src_len <= tile_elements:
        return tgt_len, src_len
    bk = min(src_len, key_block)
    bq = max(MIN_QUERY_BLOCK, tile_elements // max(batch_heads * bk, 1))
    return min(tgt_len, bq), bk


class _Tile(NamedTuple):
    index: int
    b0: int
    b1: int
    q0: int
    q1: int
    k0: int
    k1: int
    visible: Tensor | None  # (b|1, H|1, bq|1, bk) bool, None = every key of the tile visible


def _tiles(batch: int, heads: int, tgt_len: int, src_len: int,
           key_padding_mask: Tensor | None, attn_mask: Tensor | None,
           tile_elements: int, key_block: int) -> Iterator[_Tile]:
    """The tiles with at least one visible key, with their mask (None when nothing is hidden)."""
    bq, bk = tile_shape(batch * heads, tgt_len, src_len, tile_elements, key_block)
    # split the batch when even MIN_QUERY_BLOCK queries of every sequence are too many
    per_sequence = heads * min(bq, tgt_len) * bk
    bb = max(1, min(batch, tile_elements // max(per_sequence, 1)))
    index = 0
    for b0 in range(0, batch, bb):
        b1 = min(b0 + bb, batch)
        for q0 in range(0, tgt_len, bq):
            q1 = min(q0 + bq, tgt_len)
            for k0 in range(0, src_len, bk):
                k1 = min(k0 + bk, src_len)
                index += 1
                visible = None
                if key_padding_mask is not None:
                    visible = ~key_padding_mask[b0:b1, None, None, k0:k1]
                if attn_mask is not None:
                    rows = attn_mask if attn_mask.size(0) == 1 else attn_mask[b0:b1]
                    allowed = ~rows[..., q0:q1, k0:k1]
                    visible = allowed if visible is None else visible & allowed
                if visible is not None:
                    if not bool(visible.any()):
                        continue
                    if bool(visible.all()):
                        visible = None
                yield _Tile(index - 1, b0, b1, q0, q1, k0, k1, visible)


def _flat(x: Tensor) -> Tensor:
    """(B, H, T, D) -> (B*H, T, D), a view for the layouts fairseq's projections produce."""
    return x.reshape(-1, x.size(-2), x.size(-1))


def _tile_scores(q: Tensor, k: Tensor, tile: _Tile, heads: int, scale: float) -> Tensor:
    """s = ReLU(scale q k^T) of one tile as (b*H, bq, bk), blocked keys zeroed."""
    q = q[tile.b0 * heads:tile.b1 * heads, tile.q0:tile.q1]
    k = k[tile.b0 * heads:tile.b1 * heads, tile.k0:tile.k1]
    # the scale rides on the matrix product (alpha), so q is never copied scaled
    s = torch.baddbmm(q.new_empty(()), q, k.transpose(1, 2), beta=0, alpha=scale).relu_()
    if tile.visible is not None:  # a fill, not a product: NaN * 0 would stay NaN
        s.view(tile.b1 - tile.b0, -1, s.size(1), s.size(2)).masked_fill_(~tile.visible, 0.0)
    return s





def _accumulate(out: Tensor, a: Tensor, b: Tensor, alpha: float = 1.0) -> None:
    """out += alpha a @ b, batched, inside the matrix product where the dtypes allow it."""
    if out.dtype == a.dtype:
        out.baddbmm_(a, b, alpha=alpha)
    else:
        out += torch.bmm(a, b) * alpha


class _TiledReLUSums(torch.autograd.Function):
    """U, S, T, P over tiles; see the module docstring for the equations.

    Works on (B*H, T, D) views so that every sum over a tile is accumulated by the matrix
    product itself (``baddbmm_``), with no extra pass over the output.
    """

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, attn_mask, dropout_p, seed, need_sums,
                tile_elements, key_block):
        scale = q.size(-1) ** -0.5
        ctx.set_materialize_grads(False)
        batch, heads, tgt_len, _ = q.shape
        src_len = k.size(-2)
        sums_dtype = stat_dtype(q)
        low = q.dtype in (torch.float16, torch.bfloat16)
        qf, kf, vf = _flat(q), _flat(k), _flat(v)
        u = q.new_zeros(qf.shape[:-1] + (v.size(-1),), dtype=sums_dtype if low else q.dtype)
        row_sum = xlogx = positives = None
        if need_sums:
            row_sum, xlogx, positives = (q.new_zeros(qf.shape[:-1], dtype=sums_dtype)
                                         for _ in range(3))
        for tile in _tiles(batch, heads, tgt_len, src_len, key_padding_mask, attn_mask,
                           tile_elements, key_block):
            s = _tile_scores(qf, kf, tile, heads, scale)
            rows = (slice(tile.b0 * heads, tile.b1 * heads), slice(tile.q0, tile.q1))
            if need_sums:
                row_sum[rows] += s.sum(-1, dtype=sums_dtype)
                xlogx[rows] += safe_log(s).mul_(s).sum(-1)
                positives[rows] += count_positive(s, sums_dtype)
            if dropout_p:
                s.mul_(dropout_keep(s.shape, dropout_p, seed, tile.index, s))
            _accumulate(u[rows], s, vf[rows[0], tile.k0:tile.k1])
        ctx.save_for_backward(q, k, v, key_padding_mask, attn_mask)
        ctx.options = (dropout_p, seed, tile_elements, key_block)
        shape = q.shape[:-1]
        if positives is not None:
            ctx.mark_non_differentiable(positives)
            row_sum, xlogx, positives = (x.view(shape) for x in (row_sum, xlogx, positives))
        return u.view(shape + (v.size(-1),)).to(q.dtype), row_sum, xlogx, positives

    @staticmethod
    def backward(ctx, grad_u, grad_row_sum, grad_xlogx, _grad_positives):
        q, k, v, key_padding_mask, attn_mask = ctx.saved_tensors
        dropout_p, seed, tile_elements, key_block = ctx.options
        scale = q.size(-1) ** -0.5
        batch, heads, tgt_len, _ = q.shape
        src_len = k.size(-2)
        qf, kf, vf = _flat(q), _flat(k), _flat(v)
        grad_q = torch.zeros_like(qf) if ctx.needs_input_grad[0] else None
        grad_k = torch.zeros_like(kf) if ctx.needs_input_grad[1] else None
        grad_v = torch.zeros_like(vf) if ctx.needs_input_grad[2] else None
        if grad_u is not None:
            grad_u = _flat(grad_u.to(q.dtype))
        # gS_i + gT_i (log s_ij + 1) = gT_i log s_ij + (gS_i + gT_i)
        shift = grad_row_sum
        if grad_xlogx is not None:
            shift = grad_xlogx if shift is None else shift + grad_xlogx
            grad_xlogx = grad_xlogx.reshape(-1, tgt_len, 1)
        if shift is not None:
            shift = shift.reshape(-1, tgt_len, 1)
        for tile in _tiles(batch, heads, tgt_len, src_len, key_padding_mask, attn_mask,
                           tile_elements, key_block):
            s = _tile_scores(qf, kf, tile, heads, scale)
            bh = slice(tile.b0 * heads, tile.b1 * heads)
            rows = (bh, slice(tile.q0, tile.q1))
            keys = (bh, slice(tile.k0, tile.k1))
            grad_s = None
            if grad_u is not None:
                g_u = grad_u[rows]
                grad_s = torch.bmm(g_u, vf[keys].transpose(1, 2))
                keep = dropout_keep(s.shape, dropout_p, seed, tile.index, s) if dropout_p else None
                if keep is not None:
                    grad_s.mul_(keep)
                if grad_v is not None:
                    _accumulate(grad_v[keys], (s if keep is None else s * keep).transpose(1, 2),
                                g_u)
            if grad_xlogx is not None:
                term = safe_log(s).mul_(grad_xlogx[rows].to(stat_dtype(s)))
                grad_s = term.to(s.dtype) if grad_s is None else grad_s.add_(term)
            if shift is not None:
                term = shift[rows].to(s.dtype)
                grad_s = term.expand_as(s).clone() if grad_s is None else grad_s.add_(term)
            if grad_s is None:
                continue
            relu_backward(grad_s, s)  # nothing flows where s = 0, NaN where s is NaN
            if grad_q is not None:
                _accumulate(grad_q[rows], grad_s, kf[keys], scale)
            if grad_k is not None:
                _accumulate(grad_k[keys], grad_s.transpose(1, 2), qf[rows], scale)
        grads = [None if g is None else g.view(x.shape)
                 for g, x in ((grad_q, q), (grad_k, k), (grad_v, v))]
        return (*grads, None, None, None, None, None, None, None)


def tiled_relu_sums(q: Tensor, k: Tensor, v: Tensor, *,
                    key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
                    dropout_p: float = 0.0, seed: int | None = None, need_sums: bool = True,
                    tile_elements: int = TILE_ELEMENTS, key_block: int = KEY_BLOCK) -> ReLUSums:
    """U, S, T, P of the module docstring, tile by tile; ``scores`` is always None.

    q, k, v are (B, H, T, D) with the same (B, H); the result equals the dense reference
    backend's without the score matrix. ``seed`` replays the dropout masks (None: fresh).
    """
    check_qkv(q, k, v)
    if tile_elements < 1 or key_block < 1:
        raise ValueError(f"tile_elements and key_block must be positive, got {tile_elements}, "
                         f"{key_block}")
    u, row_sum, xlogx, positives = _TiledReLUSums.apply(
        q, k, v, key_padding_mask, as_4d_mask(attn_mask), float(dropout_p),
        dropout_seed(dropout_p, seed), need_sums, int(tile_elements), int(key_block),
    )
    return ReLUSums(u, row_sum, xlogx, positives, None)
