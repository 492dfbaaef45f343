"""The cpp backend: the tiled kernel's sums as compiled C++ on the CPU (relu_attention_cpu.cpp).

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", arXiv 2302.06461,
ReLU attention with variance reduction). The equations are those of ``tiled.py``:

    U_i = sum_j s_ij v_j,   S_i = sum_j s_ij,   T_i = sum_j s_ij log s_ij,   P_i = #{j: s_ij > 0}
    dL/ds_ij = gU_i . v_j + gS_i + gT_i (log s_ij + 1)    where s_ij > 0, else 0

with s_ij = ReLU(q_i . k_j / sqrt(d)) over the visible keys. ``tiled.py`` walks its tiles in
Python and writes each tile's scores to memory between torch operations; at small head sizes
that traffic, not the matrix products, sets its speed (3-4x torch's fused softmax at head size
16, n = 1,024). Here a C++ loop keeps each 128 x 512 tile in a per-thread buffer between two
BLAS products, as the CPU flash kernel of ``scaled_dot_product_attention`` does, and the
elementwise work (ReLU, mask, dropout, statistics) runs vectorised on the buffer.

The extension is built by ``pip install --no-build-isolation -e .`` (setup.py, against the
installed torch). Where it is absent (an install without it, a torch whose BLAS does not
export ``sgemm_``) ``compiled_available`` is False and the ``auto`` backend takes ``tiled``.

Dropout drops score entries before the values are summed, with keep/drop decided by a hash of
(seed, head row, query, key), so backward replays it without storing a mask; the statistics
are those of the undropped scores. The kernel runs float32 and float64; other dtypes are
computed in float32 and cast back.

Public:

    compiled_available(q) -> bool     a CPU tensor and the extension importable
    compiled_relu_sums(q, k, v, *, key_padding_mask=None, attn_mask=None, dropout_p=0.0,
                       seed=None, need_sums=True, row_scale=None)
        -> ReLUSums(u, row_sum, xlogx, positives, scores=None), the backends' contract
        (``relu_former.relu_attention.kernels.dispatch``), plus ``row_scale``: a positive
        factor f_i per query row, a number or a tensor broadcasting to (B, H, Tq), without
        the statistics; u is then sum_j f_i s_ij v_j, scaled inside the tiles (ReLU(f x) =
        f ReLU(x) for f > 0), which saves a pass over u and its gradient. The function's
        ``scales_rows`` attribute says a backend takes it.
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch
from torch import Tensor

from relu_former.relu_attention.kernels.common import (
    ReLUSums,
    as_4d_mask,
    check_qkv,
    dropout_seed,
    stat_dtype,
)

EXTENSION = "relu_former.relu_attention.kernels._relu_attention_cpu"


@functools.lru_cache(maxsize=None)
def _extension() -> ModuleType | None:
    import importlib

    try:
        return importlib.import_module(EXTENSION)
    except ImportError:
        return None


def compiled_available(q: Tensor) -> bool:
    """Whether ``compiled_relu_sums`` can run here: a CPU tensor and the extension built."""
    return q.device.type == "cpu" and _extension() is not None


def _as_bytes(mask: Tensor | None) -> Tensor | None:
    """A bool mask as the contiguous uint8 view the extension reads (no copy if contiguous)."""
    return None if mask is None else mask.contiguous().view(torch.uint8)


def _rows_contiguous(x: Tensor) -> Tensor:
    """x as the kernel reads it: any strides, but each row's last dimension contiguous (the
    heads of fairseq's projections are, and stay uncopied)."""
    return x if x.stride(-1) == 1 else x.contiguous()


class _CompiledReLUSums(torch.autograd.Function):
    """U, S, T, P from the extension; q, k, v (B, H, T, D) with contiguous rows."""

    @staticmethod
    def forward(ctx, q, k, v, padding, blocked, rows, heads, dropout_p, seed, need_sums):
        ctx.set_materialize_grads(False)
        u, row_sum, xlogx, positives = _extension().forward(
            q, k, v, padding, blocked, rows, heads, dropout_p, seed, need_sums)
        ctx.save_for_backward(q, k, v, padding, blocked, rows)
        ctx.options = (heads, dropout_p, seed)
        if not need_sums:
            return u, None, None, None
        ctx.mark_non_differentiable(positives)
        return u, row_sum, xlogx, positives

    @staticmethod
    def backward(ctx, grad_u, grad_row_sum, grad_xlogx, _grad_positives):
        q, k, v, padding, blocked, rows = ctx.saved_tensors
        heads, dropout_p, seed = ctx.options
        if grad_u is None and grad_row_sum is None and grad_xlogx is None:
            return (None,) * 10
        grad_u = None if grad_u is None else _rows_contiguous(grad_u.to(q.dtype))
        grad_sums = [None if g is None else g.to(q.dtype).contiguous()
                     for g in (grad_row_sum, grad_xlogx)]
        dq, dk, dv = _extension().backward(q, k, v, grad_u, *grad_sums, padding, blocked, rows,
                                           heads, dropout_p, seed)
        return dq, dk, dv, None, None, None, None, None, None, None


def compiled_relu_sums(q: Tensor, k: Tensor, v: Tensor, *,
                       key_padding_mask: Tensor | None = None,
                       attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                       seed: int | None = None, need_sums: bool = True,
                       row_scale: Tensor | float | None = None) -> ReLUSums:
    """U, S, T, P of the module docstring from the compiled kernel; ``scores`` is None.

    q, k, v are (B, H, T, D) with the same (B, H); masks as in ``kernels.common``;
    ``row_scale`` as in the module docstring (no gradient flows to it).
    """
    check_qkv(q, k, v)
    if _extension() is None:
        raise ValueError("the cpp backend needs the compiled extension, which this install "
                         "lacks: reinstall with `pip install --no-build-isolation -e .` "
                         "(docs/install.md), or choose auto or tiled")
    batch, heads, tgt_len, _ = q.shape
    work = stat_dtype(q)
    heads_in = [_rows_contiguous(x.to(work)) for x in (q, k, v)]
    rows = None
    if row_scale is not None:
        if need_sums:
            raise ValueError("row_scale scales the scores, the statistics need them unscaled: "
                             "ask for one of the two")
        rows = torch.as_tensor(row_scale, dtype=work).detach()
        rows = rows.reshape(rows.shape[:3]) if rows.dim() == 4 else rows
        rows = rows.expand(batch, heads, tgt_len).reshape(batch * heads, tgt_len).contiguous()
    u, row_sum, xlogx, positives = _CompiledReLUSums.apply(
        *heads_in, _as_bytes(key_padding_mask), _as_bytes(as_4d_mask(attn_mask)), rows, heads,
        float(dropout_p), dropout_seed(dropout_p, seed), bool(need_sums))
    u = u.to(q.dtype)
    if not need_sums:
        return ReLUSums(u, None, None, None, None)
    row_sum, xlogx, positives = (x.view(batch, heads, tgt_len)
                                 for x in (row_sum, xlogx, positives))
    return ReLUSums(u, row_sum, xlogx, positives, None)


compiled_relu_sums.scales_rows = True
