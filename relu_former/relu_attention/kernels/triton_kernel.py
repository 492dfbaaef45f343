"""ReLU attention as one fused Triton kernel (forward and backward): the CUDA path with dropout.

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", §2.1 ReLU
attention with variance reduction, §2.2 the regularisers' sums). The maths is that of
``relu_former.relu_attention.kernels.tiled`` (read its docstring): with
s_ij = ReLU(q_i . k_j / sqrt(d)) over the keys j that query i may see, m_ij the dropout keep
mask and p the dropout rate,

    U_i = sum_j s_ij m_ij / (1 - p) v_j,  S_i = sum_j s_ij,  T_i = sum_j s_ij log s_ij,
    P_i = #{j: s_ij > 0}

and the caller multiplies U by the variance factor 1 / (gamma sqrt(n_i / 2)), as it does for
every backend. One program owns a block of queries of one (batch, head) and walks over the
blocks of keys: a tile's scores are one ``tl.dot`` accumulated in float32 (float64 for
float64 input), and its share of U, S, T, P is added in the same pass. No running maximum
and no rescaling are needed (a ReLU score needs no normaliser), so the loop is flash
attention's without its bookkeeping; the statistics cost a few elementwise operations per
score and are compiled out (``NEED_SUMS``) when no criterion asks for them.

Backward, with gU, gS, gT the incoming gradients (tiled.py's formulas):

    dL/ds_ij = (gU_i . v_j) m_ij / (1 - p) + gS_i + gT_i (log s_ij + 1)    where s_ij > 0
    dq_i = sum_j dL/ds_ij k_j / sqrt(d),  dk_j = sum_i dL/ds_ij q_i / sqrt(d),
    dv_j = sum_i s_ij m_ij / (1 - p) gU_i

in two kernels that recompute the scores: one per key block (dk, dv, summing over query
blocks) and one per query block (dq), so no gradient is written by two programs and no
atomics are needed. Memory is O((Tq + Tk) d) in both passes.

Dropout: m_ij = [r_ij >= p] with r_ij = ``tl.rand(seed + bh, i * Tk + j)``, Triton's
counter-based Philox generator keyed by the seed and the (batch x head) index, counted by the
score's position. The backward kernels draw the same r_ij from the same counters, so the mask
is replayed exactly and never stored; ``dropout_keep_mask`` runs the same generator to show
it (tests).

Masks are those of ``relu_former.relu_attention.kernels.reference``: ``key_padding_mask``
(B, Tk) bool, True = padding; ``attn_mask`` bool, True = blocked, (Tq, Tk) or
(B|1, H|1, Tq, Tk) (a causal mask is one of these). Broadcast dimensions are read with
stride 0, so no (B, H, Tq, Tk) mask is built. Cross-attention (Tq != Tk) needs nothing else.

``triton`` is imported lazily at module import and may be absent (a CPU install has none):
``triton_available`` says whether the kernel can run here. ``TRITON_INTERPRET=1`` (set before
this module is imported) runs the kernels on the CPU in Triton's interpreter, which is how
the tests check them without a GPU (docs/testing.md).

Public:

    triton_available(q=None) -> bool
    triton_relu_sums(q, k, v, *, key_padding_mask=None, attn_mask=None, dropout_p=0.0,
                     seed=None, need_sums=True, block_m=None, block_n=None)
        -> ReLUSums(u, row_sum, xlogx, positives, scores=None); the contract of every
        backend (``relu_former.relu_attention.kernels.dispatch``).
    dropout_keep_mask(batch_heads, tgt_len, src_len, p, seed, device) -> (BH, Tq, Tk) bool
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import Tensor

from relu_former.relu_attention.kernels.common import ReLUSums, as_4d_mask

try:  # not part of a CPU install; everything below the guard needs it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised by the torch-only import test
    triton = None
    tl = None

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Philox counters are i * Tk + j in int32 within one (batch, head).
MAX_SCORES_PER_HEAD = 2**31 - 1


def interpreting() -> bool:
    """Whether Triton runs its kernels in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_available(q: Tensor | None = None) -> bool:
    """Whether ``triton_relu_sums`` can run on q's device: triton importable and q on CUDA
    (or on the CPU under ``TRITON_INTERPRET=1``); without q, whether triton is importable."""
    if triton is None and importlib.util.find_spec("triton") is None:
        return False
    if triton is None:  # installed after this module was imported
        return False
    if q is None:
        return True
    if q.device.type == "cuda":
        return not interpreting()
    return q.device.type == "cpu" and interpreting()


if triton is not None:

    @triton.jit
    def _dot(a, b, DOT_PRECISION: tl.constexpr):
        """a @ b accumulated in float32 (float64 for float64); "fp32" upcasts the operands
        first: the interpreter's numpy dot has no bfloat16."""
        if DOT_PRECISION == "fp32":
            out = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            out = tl.dot(a, b, input_precision=DOT_PRECISION)
        return out

    @triton.jit
    def _keep(seed, bh, offs_m, offs_n, src_len, dropout_p):
        """m_ij of one tile: Philox keyed by (seed + bh), counter i * Tk + j."""
        counters = offs_m[:, None] * src_len + offs_n[None, :]
        return tl.rand(seed + bh, counters) >= dropout_p

    @triton.jit
    def _program_block(heads, head_dim, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
        """What this program owns: its (batch x head) index bh, batch b and head h, its block
        of positions (queries or keys, ``program_id(1)``) and the head dims with their mask."""
        bh = tl.program_id(0)
        offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        offs_d = tl.arange(0, BLOCK_D)
        return bh, bh // heads, bh % heads, offs, offs_d, offs_d < head_dim

    @triton.jit
    def _rows(ptr, base, offs, stride, offs_d, mask):
        """The tile of rows ``offs`` of one (batch, head) (at ``base``), zero where masked."""
        return tl.load(ptr + base + offs[:, None] * stride + offs_d[None, :], mask=mask,
                       other=0.0)

    @triton.jit
    def _tile_keep(s, seed, bh, offs_m, offs_n, src_len, dropout_p,
                   HAS_DROPOUT: tl.constexpr):
        """m_ij of one tile; without dropout a placeholder that is never read."""
        keep = s > 0
        if HAS_DROPOUT:
            keep = _keep(seed, bh, offs_m, offs_n, src_len, dropout_p)
        return keep

    @triton.jit
    def _row_grads(gt_ptr, shift_ptr, rows, mask_m, BLOCK_M: tl.constexpr,
                   HAS_GT: tl.constexpr, HAS_SHIFT: tl.constexpr, IS_FP64: tl.constexpr):
        """gT and the shift gS + gT of a block of query rows (zeros where not given)."""
        acc_dtype = tl.float64 if IS_FP64 else tl.float32
        gt = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        shift = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        if HAS_GT:
            gt = tl.load(gt_ptr + rows, mask=mask_m, other=0.0)
        if HAS_SHIFT:
            shift = tl.load(shift_ptr + rows, mask=mask_m, other=0.0)
        return gt, shift

    @triton.jit
    def _scores(q, k_ptr, k_base, stride_kn, offs_m, offs_n, offs_d, mask_d, b, h, tgt_len,
                src_len, scale, kpm_ptr, stride_kpm_b, am_ptr, stride_am_b, stride_am_h,
                stride_am_m, stride_am_n, HAS_KPM: tl.constexpr, HAS_AM: tl.constexpr,
                DOT_PRECISION: tl.constexpr):
        """ReLU(q k^T * scale) of one tile with hidden and out-of-range keys zeroed, and the
        tile's key block (BLOCK_N, BLOCK_D) it loaded (rows ``offs_n`` at ``k_base``)."""
        valid_n = offs_n < src_len
        k = _rows(k_ptr, k_base, offs_n, stride_kn, offs_d, valid_n[:, None] & mask_d[None, :])
        s = _dot(q, tl.trans(k), DOT_PRECISION) * scale
        visible = (offs_m[:, None] < tgt_len) & valid_n[None, :]
        if HAS_KPM:
            pad = tl.load(kpm_ptr + b * stride_kpm_b + offs_n, mask=valid_n, other=1)
            visible = visible & (pad == 0)[None, :]
        if HAS_AM:
            blocked = tl.load(am_ptr + b * stride_am_b + h * stride_am_h
                              + offs_m[:, None] * stride_am_m + offs_n[None, :] * stride_am_n,
                              mask=visible, other=1)
            visible = visible & (blocked == 0)
        s = tl.where(visible & (s > 0), s, 0.0)
        return s, k

    @triton.jit
    def _forward_kernel(
        q_ptr, k_ptr, v_ptr, u_ptr, sum_ptr, xlogx_ptr, pos_ptr, kpm_ptr, am_ptr,
        stride_qb, stride_qm, stride_kb, stride_kn, stride_vb, stride_vn, stride_ub, stride_um,
        stride_kpm_b, stride_am_b, stride_am_h, stride_am_m, stride_am_n,
        heads, tgt_len, src_len, head_dim, scale, dropout_p, seed,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        HAS_KPM: tl.constexpr, HAS_AM: tl.constexpr, HAS_DROPOUT: tl.constexpr,
        NEED_SUMS: tl.constexpr, DOT_PRECISION: tl.constexpr, IS_FP64: tl.constexpr,
    ):
        bh, b, h, offs_m, offs_d, mask_d = _program_block(heads, head_dim, BLOCK_M, BLOCK_D)
        mask_m = offs_m < tgt_len
        q = _rows(q_ptr, bh * stride_qb, offs_m, stride_qm, offs_d,
                  mask_m[:, None] & mask_d[None, :])
        acc_dtype = tl.float64 if IS_FP64 else tl.float32
        u = tl.zeros((BLOCK_M, BLOCK_D), dtype=acc_dtype)
        row_sum = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        xlogx = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        positives = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        for start_n in range(0, src_len, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            s, _k = _scores(q, k_ptr, bh * stride_kb, stride_kn, offs_m, offs_n, offs_d, mask_d,
                            b, h, tgt_len, src_len, scale, kpm_ptr, stride_kpm_b, am_ptr,
                            stride_am_b, stride_am_h, stride_am_m, stride_am_n, HAS_KPM,
                            HAS_AM, DOT_PRECISION)
            if NEED_SUMS:
                positive = s > 0
                row_sum += tl.sum(s, 1)
                # 0 log 0 = 0: log of 1 where s = 0, so no -inf is ever multiplied
                xlogx += tl.sum(s * tl.log(tl.where(positive, s, 1.0)), 1)
                positives += tl.sum(positive.to(acc_dtype), 1)
            if HAS_DROPOUT:
                keep = _keep(seed, bh, offs_m, offs_n, src_len, dropout_p)
                s = tl.where(keep, s / (1.0 - dropout_p), 0.0)
            v = _rows(v_ptr, bh * stride_vb, offs_n, stride_vn, offs_d,
                      (offs_n < src_len)[:, None] & mask_d[None, :])
            u += _dot(s.to(v.dtype), v, DOT_PRECISION).to(acc_dtype)
        tl.store(u_ptr + bh * stride_ub + offs_m[:, None] * stride_um + offs_d[None, :],
                 u.to(u_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_d[None, :])
        if NEED_SUMS:
            rows = bh * tgt_len + offs_m
            tl.store(sum_ptr + rows, row_sum, mask=mask_m)
            tl.store(xlogx_ptr + rows, xlogx, mask=mask_m)
            tl.store(pos_ptr + rows, positives, mask=mask_m)

    @triton.jit
    def _grad_scores(s, gu, v, gt, shift, keep, dropout_p,
                     HAS_GU: tl.constexpr, HAS_GT: tl.constexpr, HAS_SHIFT: tl.constexpr,
                     HAS_DROPOUT: tl.constexpr, DOT_PRECISION: tl.constexpr):
        """dL/ds of one tile (zero where s = 0: ReLU's and the masks' derivative)."""
        ds = tl.zeros_like(s)
        if HAS_GU:
            ds = _dot(gu, tl.trans(v), DOT_PRECISION).to(s.dtype)
            if HAS_DROPOUT:
                ds = tl.where(keep, ds / (1.0 - dropout_p), 0.0)
        positive = s > 0
        if HAS_GT:
            ds += gt[:, None] * tl.log(tl.where(positive, s, 1.0))
        if HAS_SHIFT:
            ds += shift[:, None]
        return tl.where(positive, ds, 0.0)

    @triton.jit
    def _backward_kv_kernel(
        q_ptr, k_ptr, v_ptr, gu_ptr, gt_ptr, shift_ptr, dk_ptr, dv_ptr, kpm_ptr, am_ptr,
        stride_qb, stride_qm, stride_kb, stride_kn, stride_vb, stride_vn, stride_gb, stride_gm,
        stride_kpm_b, stride_am_b, stride_am_h, stride_am_m, stride_am_n,
        heads, tgt_len, src_len, head_dim, scale, dropout_p, seed,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        HAS_KPM: tl.constexpr, HAS_AM: tl.constexpr, HAS_DROPOUT: tl.constexpr,
        HAS_GU: tl.constexpr, HAS_GT: tl.constexpr, HAS_SHIFT: tl.constexpr,
        DOT_PRECISION: tl.constexpr, IS_FP64: tl.constexpr,
    ):
        bh, b, h, offs_n, offs_d, mask_d = _program_block(heads, head_dim, BLOCK_N, BLOCK_D)
        mask_nd = (offs_n < src_len)[:, None] & mask_d[None, :]
        v = _rows(v_ptr, bh * stride_vb, offs_n, stride_vn, offs_d, mask_nd)
        acc_dtype = tl.float64 if IS_FP64 else tl.float32
        dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=acc_dtype)
        dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=acc_dtype)
        for start_m in range(0, tgt_len, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            mask_m = offs_m < tgt_len
            mask_md = mask_m[:, None] & mask_d[None, :]
            q = _rows(q_ptr, bh * stride_qb, offs_m, stride_qm, offs_d, mask_md)
            s, k = _scores(q, k_ptr, bh * stride_kb, stride_kn, offs_m, offs_n, offs_d, mask_d,
                           b, h, tgt_len, src_len, scale, kpm_ptr, stride_kpm_b, am_ptr,
                           stride_am_b, stride_am_h, stride_am_m, stride_am_n, HAS_KPM,
                           HAS_AM, DOT_PRECISION)
            keep = _tile_keep(s, seed, bh, offs_m, offs_n, src_len, dropout_p, HAS_DROPOUT)
            gu = q  # placeholder when U gets no gradient (unused then)
            if HAS_GU:
                gu = _rows(gu_ptr, bh * stride_gb, offs_m, stride_gm, offs_d, mask_md)
                dropped = s
                if HAS_DROPOUT:
                    dropped = tl.where(keep, s / (1.0 - dropout_p), 0.0)
                dv += _dot(tl.trans(dropped.to(gu.dtype)), gu, DOT_PRECISION).to(acc_dtype)
            gt, shift = _row_grads(gt_ptr, shift_ptr, bh * tgt_len + offs_m, mask_m, BLOCK_M,
                                   HAS_GT, HAS_SHIFT, IS_FP64)
            ds = _grad_scores(s, gu, v, gt, shift, keep, dropout_p, HAS_GU, HAS_GT,
                              HAS_SHIFT, HAS_DROPOUT, DOT_PRECISION)
            dk += _dot(tl.trans(ds.to(q.dtype)), q, DOT_PRECISION).to(acc_dtype)
        out = bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :]
        tl.store(dk_ptr + out, (dk * scale).to(dk_ptr.dtype.element_ty), mask=mask_nd)
        tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=mask_nd)

    @triton.jit
    def _backward_q_kernel(
        q_ptr, k_ptr, v_ptr, gu_ptr, gt_ptr, shift_ptr, dq_ptr, kpm_ptr, am_ptr,
        stride_qb, stride_qm, stride_kb, stride_kn, stride_vb, stride_vn, stride_gb, stride_gm,
        stride_kpm_b, stride_am_b, stride_am_h, stride_am_m, stride_am_n,
        heads, tgt_len, src_len, head_dim, scale, dropout_p, seed,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        HAS_KPM: tl.constexpr, HAS_AM: tl.constexpr, HAS_DROPOUT: tl.constexpr,
        HAS_GU: tl.constexpr, HAS_GT: tl.constexpr, HAS_SHIFT: tl.constexpr,
        DOT_PRECISION: tl.constexpr, IS_FP64: tl.constexpr,
    ):
        bh, b, h, offs_m, offs_d, mask_d = _program_block(heads, head_dim, BLOCK_M, BLOCK_D)
        mask_m = offs_m < tgt_len
        mask_md = mask_m[:, None] & mask_d[None, :]
        q = _rows(q_ptr, bh * stride_qb, offs_m, stride_qm, offs_d, mask_md)
        acc_dtype = tl.float64 if IS_FP64 else tl.float32
        gu = q  # placeholder when U gets no gradient (unused then)
        if HAS_GU:
            gu = _rows(gu_ptr, bh * stride_gb, offs_m, stride_gm, offs_d, mask_md)
        gt, shift = _row_grads(gt_ptr, shift_ptr, bh * tgt_len + offs_m, mask_m, BLOCK_M,
                               HAS_GT, HAS_SHIFT, IS_FP64)
        dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=acc_dtype)
        for start_n in range(0, src_len, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            s, k = _scores(q, k_ptr, bh * stride_kb, stride_kn, offs_m, offs_n, offs_d, mask_d,
                           b, h, tgt_len, src_len, scale, kpm_ptr, stride_kpm_b, am_ptr,
                           stride_am_b, stride_am_h, stride_am_m, stride_am_n, HAS_KPM,
                           HAS_AM, DOT_PRECISION)
            keep = _tile_keep(s, seed, bh, offs_m, offs_n, src_len, dropout_p, HAS_DROPOUT)
            v = k  # placeholder when U gets no gradient (unused then)
            if HAS_GU:
                v = _rows(v_ptr, bh * stride_vb, offs_n, stride_vn, offs_d,
                          (offs_n < src_len)[:, None] & mask_d[None, :])
            ds = _grad_scores(s, gu, v, gt, shift, keep, dropout_p, HAS_GU, HAS_GT,
                              HAS_SHIFT, HAS_DROPOUT, DOT_PRECISION)
            dq += _dot(ds.to(k.dtype), k, DOT_PRECISION).to(acc_dtype)
        tl.store(dq_ptr + bh * stride_qb + offs_m[:, None] * stride_qm + offs_d[None, :],
                 (dq * scale).to(dq_ptr.dtype.element_ty), mask=mask_md)

    @triton.jit
    def _keep_mask_kernel(out_ptr, tgt_len, src_len, dropout_p, seed,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        bh = tl.program_id(0)
        offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
        keep = _keep(seed, bh, offs_m, offs_n, src_len, dropout_p)
        tl.store(out_ptr + bh * tgt_len * src_len + offs_m[:, None] * src_len + offs_n[None, :],
                 keep.to(tl.int8),
                 mask=(offs_m < tgt_len)[:, None] & (offs_n < src_len)[None, :])


def _require_triton() -> None:
    if triton is None:
        raise RuntimeError("the triton attention backend needs the 'triton' package (it comes "
                           "with torch's CUDA wheels); pick another backend on this install")


def _dot_precision(dtype: torch.dtype) -> str:
    """tf32 for float32 only where torch itself allows it for matmuls; exact otherwise;
    "fp32" (operands upcast) for bfloat16 in the interpreter, whose dot has no bfloat16."""
    if dtype == torch.bfloat16 and interpreting():
        return "fp32"
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 and not interpreting():
        return "tf32"
    return "ieee"


def _blocks(head_dim: int, block_m: int | None, block_n: int | None) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D): head size padded to a power of two >= 16 (tl.dot's least),
    query and key blocks of 64 (32 in the interpreter, where a block is a numpy array)."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    default = 32 if interpreting() else 64
    block_m, block_n = block_m or default, block_n or default
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {value}")
    return block_m, block_n, block_d


def _mask_args(key_padding_mask: Tensor | None, attn_mask: Tensor | None, batch: int,
               heads: int, tgt_len: int, src_len: int, like: Tensor) -> tuple:
    """Pointers (uint8 views of the bool masks, or a dummy) and strides; broadcast dims get
    stride 0 through ``expand``, so nothing of size B x H x Tq x Tk is made."""
    if key_padding_mask is not None:
        if key_padding_mask.shape != (batch, src_len):
            raise ValueError(f"key_padding_mask must be ({batch}, {src_len}), got "
                             f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.to(torch.bool).contiguous().view(torch.uint8)
        kpm_stride = kpm.stride(0)
    else:
        kpm, kpm_stride = like, 0
    attn_mask = as_4d_mask(attn_mask)
    if attn_mask is not None:
        # a same-size dtype view keeps the strides, so the expanded dims stay 0
        am = attn_mask.expand(batch, heads, tgt_len, src_len).view(torch.uint8)
        am_strides = am.stride()
    else:
        am, am_strides = like, (0, 0, 0, 0)
    return kpm, kpm_stride, am, am_strides


class _TritonReLUSums(torch.autograd.Function):
    """U, S, T, P from ``_forward_kernel``; gradients from the two backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, attn_mask, dropout_p, seed, need_sums,
                block_m, block_n):
        ctx.set_materialize_grads(False)
        batch, heads, tgt_len, head_dim = q.shape
        src_len = k.size(-2)
        qf, kf, vf = (x.reshape(batch * heads, x.size(-2), head_dim).contiguous()
                      for x in (q, k, v))
        stat_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        u = torch.empty_like(qf)
        sums = [torch.empty(batch * heads, tgt_len, device=q.device, dtype=stat_dtype)
                for _ in range(3)] if need_sums else [u, u, u]
        kpm, kpm_stride, am, am_strides = _mask_args(key_padding_mask, attn_mask, batch, heads,
                                                     tgt_len, src_len, qf)
        bm, bn, bd = _blocks(head_dim, block_m, block_n)
        scale = head_dim ** -0.5
        grid = (batch * heads, triton.cdiv(tgt_len, bm))
        _forward_kernel[grid](
            qf, kf, vf, u, *sums, kpm, am,
            qf.stride(0), qf.stride(1), kf.stride(0), kf.stride(1), vf.stride(0), vf.stride(1),
            u.stride(0), u.stride(1), kpm_stride, *am_strides,
            heads, tgt_len, src_len, head_dim, scale, float(dropout_p), seed,
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, HAS_KPM=key_padding_mask is not None,
            HAS_AM=attn_mask is not None, HAS_DROPOUT=dropout_p > 0, NEED_SUMS=need_sums,
            DOT_PRECISION=_dot_precision(q.dtype), IS_FP64=q.dtype == torch.float64,
        )
        ctx.save_for_backward(qf, kf, vf, kpm, am)
        ctx.options = (batch, heads, kpm_stride, am_strides, key_padding_mask is not None,
                       attn_mask is not None, float(dropout_p), seed, bm, bn, bd)
        ctx.shapes = (q.shape, k.shape, v.shape)
        u = u.view(q.shape)
        if not need_sums:
            return u, None, None, None
        row_sum, xlogx, positives = (x.view(q.shape[:-1]) for x in sums)
        ctx.mark_non_differentiable(positives)
        return u, row_sum, xlogx, positives

    @staticmethod
    def backward(ctx, grad_u, grad_row_sum, grad_xlogx, _grad_positives):
        qf, kf, vf, kpm, am = ctx.saved_tensors
        (batch, heads, kpm_stride, am_strides, has_kpm, has_am, dropout_p, seed,
         bm, bn, bd) = ctx.options
        bh, tgt_len, head_dim = qf.shape
        src_len = kf.size(1)
        if grad_u is None and grad_row_sum is None and grad_xlogx is None:
            return (None,) * 10
        stat_dtype = torch.float64 if qf.dtype == torch.float64 else torch.float32
        gu = (grad_u.to(qf.dtype).reshape(bh, tgt_len, head_dim).contiguous()
              if grad_u is not None else qf)
        # gS_i + gT_i (log s_ij + 1) = gT_i log s_ij + (gS_i + gT_i): one row term, the shift
        shift = None
        for g in (grad_row_sum, grad_xlogx):
            if g is not None:
                g = g.to(stat_dtype).reshape(bh, tgt_len)
                shift = g if shift is None else shift + g
        gt = (grad_xlogx.to(stat_dtype).reshape(bh, tgt_len).contiguous()
              if grad_xlogx is not None else None)
        shift = shift.contiguous() if shift is not None else None
        dq, dk, dv = torch.empty_like(qf), torch.empty_like(kf), torch.empty_like(vf)
        common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, HAS_KPM=has_kpm, HAS_AM=has_am,
                      HAS_DROPOUT=dropout_p > 0, HAS_GU=grad_u is not None,
                      HAS_GT=gt is not None, HAS_SHIFT=shift is not None,
                      DOT_PRECISION=_dot_precision(qf.dtype),
                      IS_FP64=qf.dtype == torch.float64)
        args = (qf.stride(0), qf.stride(1), kf.stride(0), kf.stride(1), vf.stride(0),
                vf.stride(1), gu.stride(0), gu.stride(1), kpm_stride, *am_strides,
                heads, tgt_len, src_len, head_dim, head_dim ** -0.5, dropout_p, seed)
        gt_arg = gt if gt is not None else qf
        shift_arg = shift if shift is not None else qf
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            _backward_kv_kernel[(bh, triton.cdiv(src_len, bn))](
                qf, kf, vf, gu, gt_arg, shift_arg, dk, dv, kpm, am, *args, **common)
        if ctx.needs_input_grad[0]:
            _backward_q_kernel[(bh, triton.cdiv(tgt_len, bm))](
                qf, kf, vf, gu, gt_arg, shift_arg, dq, kpm, am, *args, **common)
        q_shape, k_shape, v_shape = ctx.shapes
        return (dq.view(q_shape) if ctx.needs_input_grad[0] else None,
                dk.view(k_shape) if ctx.needs_input_grad[1] else None,
                dv.view(v_shape) if ctx.needs_input_grad[2] else None,
                None, None, None, None, None, None, None)


def triton_relu_sums(q: Tensor, k: Tensor, v: Tensor, *,
                     key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
                     dropout_p: float = 0.0, seed: int | None = None, need_sums: bool = True,
                     block_m: int | None = None, block_n: int | None = None) -> ReLUSums:
    """U, S, T, P of the module docstring in one Triton pass; ``scores`` is always None.

    The contract of ``fused_relu_sums``: q, k, v are (B, H, T, D) with the same (B, H); U is
    in q's dtype, S, T, P in float32 (float64 for float64 input); without ``need_sums`` only U
    is computed. ``seed`` keys the dropout masks; None draws one from torch's generator (so
    ``torch.manual_seed`` reproduces a run, as on the other backends).
    """
    _require_triton()
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.dim() != 4:
        raise ValueError("q, k and v need the same (B, H) dims and k, v the same keys, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.size(-1) != k.size(-1) or v.size(-1) != q.size(-1):
        raise ValueError("the triton backend needs one head size for q, k and v, got "
                         f"{q.size(-1)}, {k.size(-1)}, {v.size(-1)}")
    if q.dtype not in SUPPORTED_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one of {SUPPORTED_DTYPES}, got {q.dtype}, "
                        f"{k.dtype}, {v.dtype}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if q.size(-2) * k.size(-2) > MAX_SCORES_PER_HEAD:
        raise ValueError(f"Tq * Tk = {q.size(-2) * k.size(-2)} exceeds the dropout counters' "
                         f"int32 range ({MAX_SCORES_PER_HEAD}); use the tiled backend")
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    u, row_sum, xlogx, positives = _TritonReLUSums.apply(
        q, k, v, key_padding_mask, attn_mask, float(dropout_p), int(seed), bool(need_sums),
        block_m, block_n,
    )
    return ReLUSums(u, row_sum, xlogx, positives, None)


def dropout_keep_mask(batch_heads: int, tgt_len: int, src_len: int, p: float, seed: int,
                      device: torch.device | str) -> Tensor:
    """The keep mask m (BH, Tq, Tk) that ``triton_relu_sums(..., dropout_p=p, seed=seed)``
    applies, from the kernels' own generator (for tests and debugging; it is never stored)."""
    _require_triton()
    out = torch.empty(batch_heads, tgt_len, src_len, dtype=torch.int8, device=device)
    block = 32
    grid = (batch_heads, triton.cdiv(tgt_len, block), triton.cdiv(src_len, block))
    _keep_mask_kernel[grid](out, tgt_len, src_len, float(p), int(seed), BLOCK_M=block,
                            BLOCK_N=block)
    return out.bool()
