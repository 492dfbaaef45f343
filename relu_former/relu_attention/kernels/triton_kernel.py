"""ReLU attention as one fused Triton kernel (forward and backward): the CUDA path with dropout.

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", section 4.1
ReLU attention with variance reduction, section 4.2 the regularisers' sums). The maths is that of
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
score and are compiled out when no criterion asks for them.

Backward, with gU, gS, gT the incoming gradients (tiled.py's formulas):

    dL/ds_ij = (gU_i . v_j) m_ij / (1 - p) + gS_i + gT_i (log s_ij + 1)    where s_ij > 0
    dq_i = sum_j dL/ds_ij k_j / sqrt(d),  dk_j = sum_i dL/ds_ij q_i / sqrt(d),
    dv_j = sum_i s_ij m_ij / (1 - p) gU_i

in one kernel, launched twice, that recomputes the scores: over key blocks (dk, dv, summing
over query blocks) and over query blocks (dq), so no gradient is written by two programs and
no atomics are needed. Memory is O((Tq + Tk) d) in both passes.

Arguments: the tensors are contiguous (B x H, T, D) views, so a row's address follows from
(bh, T, D) and no stride is passed; the attention mask keeps its four strides (0 on broadcast
dimensions). What is absent (a mask, an incoming gradient, the statistics, dropout) is passed
as None: Triton specialises on None and compiles out the code that would read it (the
compile test, ``tests/relu_attention/kernels/test_triton_compile.py``, checks this in the
PTX).

Dropout: m_ij = [r_ij >= p] with r_ij = ``tl.rand(seed + bh, i * Tk + j)``, Triton's
counter-based Philox generator keyed by the seed and the (batch x head) index, counted by the
score's position. Both backward passes draw the same r_ij from the same counters, so the mask
is replayed exactly and never stored; ``dropout_keep_mask`` runs the same generator to show
it (tests).

NaN and inf go where they go in the reference backend (``kernels.common``): ReLU keeps a NaN
score, which then counts in U, S, T and P and makes its gradient NaN.

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
    # arguments: see "Arguments" in the module docstring (no strides; absent = None)

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
    def _tile(bh, offs, length, offs_d, head_dim):
        """Offsets and in-range mask of rows ``offs`` of head ``bh`` in a (BH, length,
        head_dim) tensor."""
        at = (bh * length + offs[:, None]) * head_dim + offs_d[None, :]
        return at, (offs < length)[:, None] & (offs_d < head_dim)[None, :]

    @triton.jit
    def _scores(q, k, bh, offs_m, offs_n, tgt_len, src_len, heads, scale, masks,
                DOT_PRECISION: tl.constexpr):
        """ReLU(q k^T * scale) of one tile, zero for keys out of range, padded or blocked.

        ``masks`` = (key padding (B, Tk) or None, attention mask or None, and the attention
        mask's four strides, 0 on broadcast dims)."""
        kpm_ptr = masks[0]
        am_ptr = masks[1]
        s = _dot(q, tl.trans(k), DOT_PRECISION) * scale
        valid_n = offs_n < src_len
        visible = (offs_m[:, None] < tgt_len) & valid_n[None, :]
        if kpm_ptr is not None:
            pad = tl.load(kpm_ptr + (bh // heads) * src_len + offs_n, mask=valid_n, other=1)
            visible = visible & (pad == 0)[None, :]
        if am_ptr is not None:
            blocked = tl.load(am_ptr + (bh // heads) * masks[2] + (bh % heads) * masks[3]
                              + offs_m[:, None] * masks[4] + offs_n[None, :] * masks[5],
                              mask=visible, other=1)
            visible = visible & (blocked == 0)
        s = tl.where(visible, s, 0.0)
        return tl.where(s < 0, 0.0, s)  # ReLU that keeps NaN (not `s > 0`, which drops it)

    @triton.jit
    def _dropped(s, seed, bh, offs_m, offs_n, src_len, dropout_p, keep_scale):
        """s_ij m_ij / (1 - p) of one tile (``keep_scale`` = 1 / (1 - p)), and the keep mask
        (s itself without dropout)."""
        keep = s > 0
        if dropout_p is not None:
            keep = _keep(seed, bh, offs_m, offs_n, src_len, dropout_p)
            s = s * tl.where(keep, keep_scale, 0.0)  # a product: a dropped NaN stays NaN
        return s, keep

    @triton.jit
    def _load_given(ptr, at, mask):
        """The block at ``ptr + at`` (zero where masked), or None where ``ptr`` is None."""
        block = None
        if ptr is not None:
            block = tl.load(ptr + at, mask=mask, other=0.0)
        return block

    @triton.jit
    def _grad_scores(s, gu, v, gt, shift, keep, dropout_p, keep_scale,
                     DOT_PRECISION: tl.constexpr):
        """dL/ds of one tile (zero where s = 0: ReLU's and the masks' derivative; NaN where
        s is NaN)."""
        ds = tl.zeros_like(s)
        if gu is not None:
            ds = _dot(gu, tl.trans(v), DOT_PRECISION).to(s.dtype)
            if dropout_p is not None:
                ds = ds * tl.where(keep, keep_scale, 0.0)
        positive = s > 0
        if gt is not None:
            ds += gt[:, None] * tl.log(tl.where(positive, s, 1.0))
        if shift is not None:
            ds += shift[:, None]
        return tl.where(positive, ds, s)

    @triton.jit
    def _backward_tile(q, k, v, gu, gt, shift, bh, offs_m, offs_n, tgt_len, src_len, heads,
                       scale, masks, dropout_p, keep_scale, seed, DOT_PRECISION: tl.constexpr):
        """dL/ds of one tile, with its scores recomputed, and s m / (1 - p) (dv's factor)."""
        s = _scores(q, k, bh, offs_m, offs_n, tgt_len, src_len, heads, scale, masks,
                    DOT_PRECISION)
        dropped, keep = _dropped(s, seed, bh, offs_m, offs_n, src_len, dropout_p, keep_scale)
        return (_grad_scores(s, gu, v, gt, shift, keep, dropout_p, keep_scale, DOT_PRECISION),
                dropped)

    @triton.jit
    def _forward_kernel(q_ptr, k_ptr, v_ptr, u_ptr, sum_ptr, xlogx_ptr, pos_ptr, masks,
                        heads, tgt_len, src_len, head_dim, factors_ptr, dropout_p, seed,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                        DOT_PRECISION: tl.constexpr, IS_FP64: tl.constexpr):
        """U (and S, T, P unless ``sum_ptr`` is None) of query block ``program_id(1)``."""
        bh = tl.program_id(0)
        scale, keep_scale = tl.load(factors_ptr), tl.load(factors_ptr + 1)
        offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        q_at, q_in = _tile(bh, offs_m, tgt_len, offs_d, head_dim)
        q = tl.load(q_ptr + q_at, mask=q_in, other=0.0)
        acc_dtype = tl.float64 if IS_FP64 else tl.float32
        u = tl.zeros((BLOCK_M, BLOCK_D), dtype=acc_dtype)
        row_sum = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        xlogx = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        positives = tl.zeros((BLOCK_M,), dtype=acc_dtype)
        for start_n in range(0, src_len, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            kv_at, kv_in = _tile(bh, offs_n, src_len, offs_d, head_dim)
            s = _scores(q, tl.load(k_ptr + kv_at, mask=kv_in, other=0.0), bh, offs_m, offs_n,
                        tgt_len, src_len, heads, scale, masks, DOT_PRECISION)
            if sum_ptr is not None:
                positive = s > 0
                row_sum += tl.sum(s, 1)
                # 0 log 0 = 0: log of 1 where s = 0, so no -inf is ever multiplied
                xlogx += tl.sum(s * tl.log(tl.where(positive, s, 1.0)), 1)
                positives += tl.sum(tl.where(positive, 1.0, s).to(acc_dtype), 1)  # NaN kept
            s, _keep_mask = _dropped(s, seed, bh, offs_m, offs_n, src_len, dropout_p,
                                     keep_scale)
            v = tl.load(v_ptr + kv_at, mask=kv_in, other=0.0)
            u += _dot(s.to(v.dtype), v, DOT_PRECISION).to(acc_dtype)
        tl.store(u_ptr + q_at, u.to(u_ptr.dtype.element_ty), mask=q_in)
        if sum_ptr is not None:
            rows = bh * tgt_len + offs_m
            tl.store(sum_ptr + rows, row_sum, mask=offs_m < tgt_len)
            tl.store(xlogx_ptr + rows, xlogx, mask=offs_m < tgt_len)
            tl.store(pos_ptr + rows, positives, mask=offs_m < tgt_len)

    @triton.jit
    def _backward_kernel(q_ptr, k_ptr, v_ptr, gu_ptr, gt_ptr, shift_ptr, dq_ptr, dk_ptr,
                         dv_ptr, masks, heads, tgt_len, src_len, head_dim, factors_ptr,
                         dropout_p, seed, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
                         IS_FP64: tl.constexpr):
        """dq of query block ``program_id(1)`` (given ``dq_ptr``), or dk and dv of key block
        ``program_id(1)`` (given ``dk_ptr`` and ``dv_ptr``): launched once for each, so no
        gradient is written by two programs. ``gu_ptr``, ``gt_ptr``, ``shift_ptr``: the
        incoming gU, gT and gS + gT, each None when zero."""
        bh = tl.program_id(0)
        scale, keep_scale = tl.load(factors_ptr), tl.load(factors_ptr + 1)
        offs_d = tl.arange(0, BLOCK_D)
        acc_dtype = tl.float64 if IS_FP64 else tl.float32
        if dq_ptr is not None:
            offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
            q_at, q_in = _tile(bh, offs_m, tgt_len, offs_d, head_dim)
            q = tl.load(q_ptr + q_at, mask=q_in, other=0.0)
            gu = _load_given(gu_ptr, q_at, q_in)
            rows = bh * tgt_len + offs_m
            gt = _load_given(gt_ptr, rows, offs_m < tgt_len)
            shift = _load_given(shift_ptr, rows, offs_m < tgt_len)
            dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=acc_dtype)
            for start_n in range(0, src_len, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                kv_at, kv_in = _tile(bh, offs_n, src_len, offs_d, head_dim)
                k = tl.load(k_ptr + kv_at, mask=kv_in, other=0.0)
                # v is read only when U has a gradient
                v = _load_given(v_ptr if gu_ptr is not None else None, kv_at, kv_in)
                ds, _s_dropped = _backward_tile(q, k, v, gu, gt, shift, bh, offs_m, offs_n,
                                                tgt_len, src_len, heads, scale, masks,
                                                dropout_p, keep_scale, seed, DOT_PRECISION)
                dq += _dot(ds.to(k.dtype), k, DOT_PRECISION).to(acc_dtype)
            tl.store(dq_ptr + q_at, (dq * scale).to(dq_ptr.dtype.element_ty), mask=q_in)
        else:
            offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            kv_at, kv_in = _tile(bh, offs_n, src_len, offs_d, head_dim)
            k = tl.load(k_ptr + kv_at, mask=kv_in, other=0.0)
            v = tl.load(v_ptr + kv_at, mask=kv_in, other=0.0)
            dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=acc_dtype)
            dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=acc_dtype)
            for start_m in range(0, tgt_len, BLOCK_M):
                offs_m = start_m + tl.arange(0, BLOCK_M)
                q_at, q_in = _tile(bh, offs_m, tgt_len, offs_d, head_dim)
                q = tl.load(q_ptr + q_at, mask=q_in, other=0.0)
                gu = _load_given(gu_ptr, q_at, q_in)
                rows = bh * tgt_len + offs_m
                ds, dropped = _backward_tile(q, k, v, gu,
                                             _load_given(gt_ptr, rows, offs_m < tgt_len),
                                             _load_given(shift_ptr, rows, offs_m < tgt_len),
                                             bh, offs_m, offs_n, tgt_len, src_len, heads,
                                             scale, masks, dropout_p, keep_scale, seed,
                                             DOT_PRECISION)
                if gu_ptr is not None:
                    dv += _dot(tl.trans(dropped.to(gu.dtype)), gu, DOT_PRECISION).to(acc_dtype)
                dk += _dot(tl.trans(ds.to(q.dtype)), q, DOT_PRECISION).to(acc_dtype)
            tl.store(dk_ptr + kv_at, (dk * scale).to(dk_ptr.dtype.element_ty), mask=kv_in)
            tl.store(dv_ptr + kv_at, dv.to(dv_ptr.dtype.element_ty), mask=kv_in)

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


def _masks(key_padding_mask: Tensor | None, attn_mask: Tensor | None, batch: int,
           heads: int, tgt_len: int, src_len: int, wide: bool = False) -> tuple:
    """The kernels' ``masks`` tuple: uint8 views of the bool masks (None where absent) and
    the attention mask's strides, 0 on broadcast dims through ``expand``, so nothing of size
    B x H x Tq x Tk is made.

    ``wide``: int32 copies instead (made before ``expand``, so still nothing of that size).
    Triton 3.6 fails to lower 8-bit loads laid out like a float64 dot's result on an H200
    ("PassManager::run failed" in ConvertTritonGPUToLLVM), so float64 on CUDA uses these."""
    mask_dtype = torch.int32 if wide else torch.uint8
    kpm = None
    if key_padding_mask is not None:
        if key_padding_mask.shape != (batch, src_len):
            raise ValueError(f"key_padding_mask must be ({batch}, {src_len}), got "
                             f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.to(torch.bool).contiguous()
        kpm = kpm.to(mask_dtype) if wide else kpm.view(mask_dtype)
    am, am_strides = None, (0, 0, 0, 0)
    attn_mask = as_4d_mask(attn_mask)
    if attn_mask is not None:
        # a same-size dtype view keeps the strides, so the expanded dims stay 0
        if wide:
            attn_mask = attn_mask.to(mask_dtype)
        am = attn_mask.expand(batch, heads, tgt_len, src_len).view(mask_dtype)
        am_strides = am.stride()
    return (kpm, am, *am_strides)


def _compile_options(dtype: torch.dtype, block_m: int, block_n: int, block_d: int) -> dict:
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                DOT_PRECISION=_dot_precision(dtype), IS_FP64=dtype == torch.float64)


class _TritonReLUSums(torch.autograd.Function):
    """U, S, T, P from ``_forward_kernel``; gradients from ``_backward_kernel``."""

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
                for _ in range(3)] if need_sums else [None, None, None]
        masks = _masks(key_padding_mask, attn_mask, batch, heads, tgt_len, src_len,
                       wide=q.dtype == torch.float64)
        options = _compile_options(q.dtype, *_blocks(head_dim, block_m, block_n))
        # Triton passes Python floats as float32, so the factors float64 input needs exact
        # (1/sqrt(d) and the keep scale 1/(1-p)) travel as a tensor in the statistics' dtype
        factors = torch.tensor([head_dim ** -0.5, 1.0 / (1.0 - dropout_p)], dtype=stat_dtype,
                               device=q.device)
        # the kernels' arguments after their tensors; dropout_p None compiles dropout out
        scalars = (heads, tgt_len, src_len, head_dim, factors,
                   float(dropout_p) if dropout_p > 0 else None, seed)
        grid = (batch * heads, triton.cdiv(tgt_len, options["BLOCK_M"]))
        _forward_kernel[grid](qf, kf, vf, u, *sums, masks, *scalars, **options)
        ctx.save_for_backward(qf, kf, vf)
        ctx.masks, ctx.scalars, ctx.options = masks, scalars, options
        ctx.shapes = (q.shape, k.shape, v.shape)
        u = u.view(q.shape)
        if not need_sums:
            return u, None, None, None
        row_sum, xlogx, positives = (x.view(q.shape[:-1]) for x in sums)
        ctx.mark_non_differentiable(positives)
        return u, row_sum, xlogx, positives

    @staticmethod
    def backward(ctx, grad_u, grad_row_sum, grad_xlogx, _grad_positives):
        qf, kf, vf = ctx.saved_tensors
        bh, tgt_len, head_dim = qf.shape
        src_len = kf.size(1)
        if grad_u is None and grad_row_sum is None and grad_xlogx is None:
            return (None,) * 10
        stat_dtype = torch.float64 if qf.dtype == torch.float64 else torch.float32
        gu = (grad_u.to(qf.dtype).reshape(bh, tgt_len, head_dim).contiguous()
              if grad_u is not None else None)
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
        grads = (qf, kf, vf, gu, gt, shift)
        block_m, block_n = ctx.options["BLOCK_M"], ctx.options["BLOCK_N"]
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            _backward_kernel[(bh, triton.cdiv(src_len, block_n))](
                *grads, None, dk, dv, ctx.masks, *ctx.scalars, **ctx.options)
        if ctx.needs_input_grad[0]:
            _backward_kernel[(bh, triton.cdiv(tgt_len, block_m))](
                *grads, dq, None, None, ctx.masks, *ctx.scalars, **ctx.options)
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
