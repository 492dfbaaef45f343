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
installed torch), with OpenMP where the compiler has it. Every install succeeds without it:
setup.py then leaves a note beside it (``_relu_attention_cpu_build.json``) saying why (pip's
build isolation, no compiler), and where the module is missing or fails to load (a torch
upgrade since the build, a BLAS that does not export ``sgemm_``) ``compiled_problem`` names
the cause, ``compiled_available`` is False and the ``auto`` backend takes ``tiled`` and says
so once (``dispatch.py``). A kernel built without OpenMP runs on one thread: its first load
says so once.

Dropout drops score entries before the values are summed, with keep/drop decided by a hash of
(seed, head row, query, key), so backward replays it without storing a mask; the statistics
are those of the undropped scores. The kernel runs float32 and float64; other dtypes are
computed in float32 and cast back.

Public:

    compiled_available(q) -> bool     a CPU tensor and the extension loaded
    compiled_problem() -> str         '' where the extension loads, else why not
    compiled_status() -> str          one line: loads (with OpenMP or serial), or why not
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
import importlib
import json
import logging
from pathlib import Path
from types import ModuleType
from typing import Tuple

import torch
from torch import Tensor

from relu_former.relu_attention.kernels.common import (
    ReLUSums,
    as_4d_mask,
    check_qkv,
    dropout_seed,
    stat_dtype,
)

logger = logging.getLogger(__name__)

EXTENSION = "relu_former.relu_attention.kernels._relu_attention_cpu"
# what setup.py built, or why nothing: {"built": bool, "why": str, "torch": version}
BUILD_NOTE = Path(__file__).with_name("_relu_attention_cpu_build.json")
REBUILD = "pip install --no-build-isolation --no-deps -e ."


def _build_note() -> dict:
    try:
        return json.loads(BUILD_NOTE.read_text())
    except (OSError, ValueError):  # built before notes were written, or by hand
        return {}


@functools.lru_cache(maxsize=None)
def _loaded() -> Tuple[ModuleType | None, str]:
    """(the extension, '') or (None, why it is not loaded); read once a process."""
    note = _build_note()
    try:
        module = importlib.import_module(EXTENSION)
    except (ImportError, OSError) as error:
        if isinstance(error, ModuleNotFoundError) and error.name == EXTENSION:
            return None, ("not built: " + note["why"] if note.get("built") is False
                          else "not built (setup.py's build step did not run, or its file "
                          "was removed)")
        built_for = note.get("torch")
        upgrade = (f"built for torch {built_for}, this is {torch.__version__}"
                   if built_for and built_for != torch.__version__ else
                   "built for another torch, or a BLAS without sgemm_")
        message = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        return None, f"fails to load ({message}): {upgrade}"
    if note.get("built") and note.get("why"):
        logger.warning("ReLU attention: the compiled CPU kernel was %s. Rebuild it with a "
                       "compiler that has OpenMP: `%s` (docs/install.md)", note["why"], REBUILD)
    return module, ""


def _extension() -> ModuleType | None:
    return _loaded()[0]


def compiled_problem() -> str:
    """'' where the compiled kernel loads, else why not (for warnings and the report)."""
    return _loaded()[1]


def compiled_status() -> str:
    """One line for the backends report: loaded (and how it was built), or why not."""
    if compiled_problem():
        return f"not loaded: {compiled_problem()}"
    why = _build_note().get("why")
    return "loads" if why is None else f"loads; {why}" if why else "loads, built with OpenMP"


def compiled_available(q: Tensor) -> bool:
    """Whether ``compiled_relu_sums`` can run here: a CPU tensor and the extension loaded."""
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
        raise ValueError(f"the cpp backend needs the compiled kernel, which is "
                         f"{compiled_problem()}: rebuild it with `{REBUILD}` "
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
