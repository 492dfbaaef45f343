"""The first-use check: a compiled GPU kernel, run once on a small input, against float64.

The Triton and FlexAttention kernels are compiled for the GPU they first run on, where a
compiler fault, a shared-memory limit or a wrong sum would otherwise be every GPU user's first
training. So the first time a process would use one of them on a device (``dispatch.py``), it
runs the backend on a small input of the caller's head size and dtype (2 x 2 heads, 72 queries,
80 keys: more than a 64-key block; a padded batch row, a banded mask, a query that sees no
key) and compares, with the dense float64 sums of ``kernels/reference.py``'s equations,

    U, S, T, P                        forward, with and without the statistics
    dq, dk, dv of U.gU + S.gS + T.gT  backward

first without dropout, then (for backends with dropout) with dropout, whose backward must
replay the forward's mask. The mask is the kernel's own: with v the columns of the identity,
U_ij = s_ij m_ij / (1 - p), so a few forward calls on those columns read it off, whatever
generator the backend draws from; the float64 sums then use that mask.

The check runs outside the caller's autocast and no_grad, draws its inputs from its own
generator (the training's random stream is untouched) and takes a few milliseconds plus the
kernel's compile. Its result is kept per (backend, device, dtype) for the process.

Public:

    first_use_problem(name, backend, q, dropout) -> str   '' if it passed, else what failed
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

from relu_former.relu_attention.kernels.common import count_positive, visible_keys, xlogx_sum

BATCH, HEADS, QUERIES, KEYS = 2, 2, 72, 80
DROPOUT = 0.25
SEED = 1234
# allowed error, relative to the largest reference entry: float32 may multiply in TF32 (10-bit
# mantissa); a faulty kernel misses by O(1)
TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-2, torch.float16: 2e-2,
             torch.bfloat16: 5e-2}

_results: Dict[Tuple[str, torch.device, torch.dtype], str] = {}


def first_use_problem(name: str, backend: Callable, q: Tensor, dropout: bool) -> str:
    """'' if ``backend`` gives the float64 sums and gradients on q's device and dtype (with
    ``dropout``, also with dropout), else one line saying what failed; run once per
    (name, device, dtype) in a process."""
    key = (name, q.device, q.dtype)
    if key not in _results:
        _results[key] = _check(backend, q.device, q.dtype, q.size(-1), dropout)
    return _results[key]


def _check(backend: Callable, device: torch.device, dtype: torch.dtype, head_dim: int,
           dropout: bool) -> str:
    inputs = _inputs(head_dim)
    with torch.inference_mode(False), torch.enable_grad(), \
            torch.autocast(device.type, enabled=False):
        for dropout_p in (0.0, DROPOUT) if dropout else (0.0,):
            for need_sums in (True, False):
                try:
                    problem = _compare(backend, inputs, device, dtype, dropout_p, need_sums)
                except Exception as error:  # a compile error, a launch failure, a shape bug
                    problem = (f"raised {type(error).__name__}: "
                               f"{(str(error).strip().splitlines() or [''])[0][:200]}")
                if problem:
                    return problem + (f" (dropout {dropout_p}, statistics "
                                      f"{'on' if need_sums else 'off'})")
    return ""


def _inputs(head_dim: int) -> dict:
    """q, k, v and the incoming gradients in float64, and the masks (on the CPU)."""
    generator = torch.Generator().manual_seed(0)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    padding = torch.zeros(BATCH, KEYS, dtype=torch.bool)
    padding[1, -11:] = True
    position = torch.arange(KEYS)
    blocked = position[None, :] > torch.arange(QUERIES)[:, None] + 8  # a band, as causal
    blocked[0] = True  # a query that sees no key
    return dict(q=draw(BATCH, HEADS, QUERIES, head_dim), k=draw(BATCH, HEADS, KEYS, head_dim),
                v=draw(BATCH, HEADS, KEYS, head_dim), grad_u=draw(BATCH, HEADS, QUERIES, head_dim),
                grad_sums=draw(2, BATCH, HEADS, QUERIES), padding=padding, blocked=blocked)


def _compare(backend: Callable, inputs: dict, device: torch.device, dtype: torch.dtype,
             dropout_p: float, need_sums: bool) -> str:
    """'' or the first tensor that differs from the float64 sums, and by how much."""
    masks = dict(key_padding_mask=inputs["padding"].to(device),
                 attn_mask=inputs["blocked"].to(device), dropout_p=dropout_p, seed=SEED)
    q, k, v = (inputs[name].to(device, dtype).requires_grad_() for name in "qkv")
    got = backend(q, k, v, **masks, need_sums=need_sums)
    loss = (got.u.double() * inputs["grad_u"].to(device)).sum()
    if need_sums:
        grad_s, grad_t = inputs["grad_sums"].to(device)
        loss = loss + (got.row_sum.double() * grad_s).sum() + (got.xlogx.double() * grad_t).sum()
    grads = torch.autograd.grad(loss, (q, k, v))
    keep = _keep_mask(backend, q.detach(), k.detach(), masks) if dropout_p else 1.0
    want = _float64_sums(*(x.detach().cpu().double() for x in (q, k, v)), inputs, keep,
                         dropout_p, need_sums)
    names = ("U", "S", "T", "P")[:4 if need_sums else 1] + ("dq", "dk", "dv")
    values = [got.u, *((got.row_sum, got.xlogx, got.positives) if need_sums else ()), *grads]
    for name, value, reference in zip(names, values, want):
        scale = reference.abs().max().item() + 1e-6
        error = (value.detach().cpu().double() - reference).abs().max().item()
        if not error <= TOLERANCE[dtype] * scale:  # NaN fails too
            return f"{name} differs from the float64 reference by {error:.3g} (scale {scale:.3g})"
    return ""


def _keep_mask(backend: Callable, q: Tensor, k: Tensor, masks: dict) -> Tensor:
    """The backend's dropout mask m (B, H, Tq, Tk) as float64 on the CPU, read from its
    outputs on the identity's columns, D at a time (U_ij = s_ij m_ij / (1 - p))."""
    head_dim = q.size(-1)
    identity = torch.eye(KEYS, dtype=q.dtype, device=q.device).expand(BATCH, HEADS, KEYS, KEYS)
    columns = []
    with torch.no_grad():
        for start in range(0, KEYS, head_dim):
            part = identity[..., start:start + head_dim]
            if part.size(-1) < head_dim:  # pad the last block of columns to the head size
                part = torch.nn.functional.pad(part, (0, head_dim - part.size(-1)))
            width = min(head_dim, KEYS - start)
            columns.append(backend(q, k, part.contiguous(), **masks, need_sums=False).u
                           [..., :width])
    weights = torch.cat(columns, -1).cpu().double() * (1 - masks["dropout_p"])
    scores = _scores(q.cpu().double(), k.cpu().double(), masks["key_padding_mask"].cpu(),
                     masks["attn_mask"].cpu())
    return (weights > scores / 2).double()  # where s = 0 the mask does not matter


def _scores(q: Tensor, k: Tensor, padding: Tensor, blocked: Tensor) -> Tensor:
    """s = ReLU(q k^T / sqrt(d)), 0 where the key is hidden (out of place: autograd)."""
    s = torch.relu(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1)))
    return s.masked_fill(~visible_keys(padding, blocked), 0.0)


def _float64_sums(q: Tensor, k: Tensor, v: Tensor, inputs: dict, keep: Tensor | float,
                  dropout_p: float, need_sums: bool) -> list:
    """U (S, T, P) and dq, dk, dv, dense in float64, dropout applied through ``keep``."""
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    s = _scores(q, k, inputs["padding"], inputs["blocked"])
    u = torch.matmul(s * keep / (1 - dropout_p), v)
    loss = (u * inputs["grad_u"]).sum()
    sums = []
    if need_sums:
        row_sum, xlogx = s.sum(-1), xlogx_sum(s)
        loss = loss + (row_sum * inputs["grad_sums"][0]).sum() + (
            xlogx * inputs["grad_sums"][1]).sum()
        sums = [row_sum.detach(), xlogx.detach(), count_positive(s.detach(), torch.float64)]
    return [u.detach(), *sums, *torch.autograd.grad(loss, (q, k, v))]
