"""Sparse-softmax: a softmax over the k largest logits, and its cross-entropy.

Sun et al., "Sparse-softmax: A Simpler and Faster Alternative Softmax Transformation"
(ACL 2022, arXiv:2112.12433): the transformation and its loss are the paper's method section.

With Omega_k the indices of the k largest logits z of a row (V classes):

    sparse_softmax_k(z)_i = exp(z_i) / sum_{j in Omega_k} exp(z_j)   for i in Omega_k, else 0
    L(z, t)               = log sum_{j in Omega_k} exp(z_j) - z_t

The target t is *not* forced into Omega_k: when it falls outside, dL/dz_t = -1 and the top-k
logits still get their restricted probabilities as gradient, which pushes them down and z_t
up. L >= 0 (z_t <= logsumexp over Omega_k whether t is inside or not), k >= V gives ordinary
cross-entropy and k = 1 gives max(z) - z_t.

Label smoothing (epsilon). The paper defines none for k < V; two rules are offered, both with
the target keeping weight 1 - eps and both writing C = Omega_k minus {t} for the other classes
of the sparse support:

    L_eps = (1 - eps) L + w * sum_{j in C} (log sum_{Omega_k} exp(z) - z_j)

- ``"top_k"`` (the default), w = eps / |C|: the whole of eps is spread uniformly over C.
- ``"vocabulary"``, w = eps / (V - 1): fairseq's smoothing target (eps / (V - 1) on every
  non-target class) computed on the top k only, i.e. the terms of the classes outside
  Omega_k are left out. The smoothing mass that acts is then eps |C| / (V - 1), small when
  k << V.

Smoothing over the whole vocabulary literally is not defined: outside Omega_k sparse-softmax
gives probability exactly 0 (log-probability -inf), so any mass placed there makes the loss
infinite; "left out" above is the only finite reading. Leaving the target out of C makes
k >= V reproduce fairseq's ``label_smoothed_cross_entropy`` exactly under both rules (|C| is
then V - 1). When C is empty (k = 1 and t is the argmax) the smoothing term is 0, and so is
the whole loss.

Ties at the k-th largest logit are broken deterministically: among logits equal to the k-th
largest value, the lower class index enters Omega_k (``torch.topk`` does not promise any
order among equal values). The rule only costs a stable sort of the rows that actually have a
tie across the boundary.

Memory: the loss never builds a V-wide log-softmax. The forward keeps k values and indices
per row; the backward writes the (unavoidable) dense gradient of the logits with two
scatters. The full-softmax nll, for logging only, is computed without gradient in row chunks.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Tuple

import torch
from torch import Tensor

# Rows per chunk of the logging-only full-softmax nll are chosen so that one chunk's float32
# temporaries stay near this many elements (1 MiB): they then stay in a core's L2 cache, which
# on CPU made the nll about twice as fast as 16 MiB chunks (measured at V = 32000).
_NLL_CHUNK_ELEMENTS = 1 << 18


def _wide(x: Tensor) -> Tensor:
    """``x`` in float32, or in its own dtype when that is wider (float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


# The label-smoothing rules of the module docstring: how eps is shared among C.
SMOOTHING_RULES = ("top_k", "vocabulary")


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"sparse-softmax k must be an integer >= 1, got {k!r}")


def _top_k_plus_one(flat: Tensor, k: int) -> Tuple[Tensor, Tensor, Tensor | None]:
    """The k + 1 largest of some candidates per row, and a bound on every other entry.

    Returns ``(values, indices, outside_max)``: the sorted k + 1 largest candidates of each
    row of ``flat`` (N, V) with their column indices, and an upper bound on every entry that
    was not a candidate (None when every entry was one).

    For large V the candidates come from blocks: split each row into B blocks of s entries
    (block b holds columns b, b + B, b + 2B, ... so the block maxima reduce over contiguous
    memory) and keep the k blocks with the largest maxima. The k-th largest entry is >= the
    k-th largest block maximum (k blocks each hold an entry that large), so every top-k entry
    lies in one of those k blocks, and any other entry is <= the (k+1)-th block maximum. This
    replaces a top-k over V entries by a max over V, a top-k over B and one over k * s, which is
    what makes the criterion several times cheaper than log-softmax on CPU.
    """
    rows, vocab = flat.shape
    size = max(4, round(math.sqrt(vocab / k)))  # s: balances the top-k over B and over k*s
    blocks = vocab // size
    # Blocks pay off when both top-ks together see well under half a row (measured on CPU).
    if rows == 0 or blocks <= k + 1 or 2 * (k * size + blocks) > vocab:
        values, indices = flat.topk(k + 1, dim=-1, largest=True, sorted=True)
        return values, indices, None
    body = blocks * size
    grid = flat[:, :body].unflatten(1, (size, blocks))  # grid[n, i, b] = flat[n, i * B + b]
    block_max, block_ids = grid.amax(dim=1).topk(k + 1, dim=-1, largest=True, sorted=True)
    chosen = block_ids[:, :k].unsqueeze(1).expand(rows, size, k)
    candidates = grid.gather(2, chosen).flatten(1)
    columns = (torch.arange(size, device=flat.device).unsqueeze(1) * blocks + chosen).flatten(1)
    if body < vocab:  # the last vocab % s columns are always candidates
        candidates = torch.cat([candidates, flat[:, body:]], dim=1)
        tail = torch.arange(body, vocab, device=flat.device).expand(rows, vocab - body)
        columns = torch.cat([columns, tail], dim=1)
    values, picked = candidates.topk(k + 1, dim=-1, largest=True, sorted=True)
    return values, columns.gather(1, picked), block_max[:, k]


def top_k(logits: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """The k largest entries along the last dimension and their indices, ties broken by index.

    Returns ``(values, indices)`` of shape ``logits.shape[:-1] + (min(k, V),)``, sorted by
    decreasing value. The *set* of indices is deterministic: among entries equal to the k-th
    largest value the lower indices are taken. For k >= V every index is returned in its own
    order (the set is then everything).
    """
    _check_k(k)
    vocab = logits.size(-1)
    if k >= vocab:
        indices = torch.arange(vocab, device=logits.device).expand(logits.shape)
        return logits, indices
    flat = logits.reshape(-1, vocab)
    values, indices, outside_max = _top_k_plus_one(flat, k)
    # A row needs the tie rule when an entry left out may equal the k-th value kept.
    kth = values[:, k - 1]
    tied = kth == values[:, k]
    if outside_max is not None:
        tied |= outside_max >= kth
    values, indices = values[:, :k], indices[:, :k]
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        sorted_values, sorted_indices = torch.sort(
            flat.index_select(0, rows), dim=-1, descending=True, stable=True
        )
        values = values.index_copy(0, rows, sorted_values[:, :k].contiguous())
        indices = indices.index_copy(0, rows, sorted_indices[:, :k].contiguous())
    shape = logits.shape[:-1] + (k,)
    return values.reshape(shape), indices.reshape(shape)


def sparse_log_softmax(logits: Tensor, k: int) -> Tensor:
    """log sparse_softmax_k over the last dimension: z_i - logsumexp(z[Omega_k]), else -inf.

    Rows whose kept logits are all -inf stay all -inf (no NaN).
    """
    values, indices = top_k(logits, k)
    log_norm = torch.logsumexp(values, dim=-1, keepdim=True)
    kept = torch.where(torch.isfinite(log_norm), values - log_norm, values.new_tensor(-torch.inf))
    if k >= logits.size(-1):
        return kept
    return torch.full_like(logits, -torch.inf).scatter(-1, indices, kept)


def sparse_softmax(logits: Tensor, k: int) -> Tensor:
    """sparse_softmax_k over the last dimension: a distribution supported on Omega_k."""
    return sparse_log_softmax(logits, k).exp()


class SparseSoftmaxLoss(NamedTuple):
    """Per-position results of :func:`sparse_softmax_cross_entropy` (0 at padding)."""

    loss: Tensor  # the (label-smoothed) loss, differentiable w.r.t. the logits
    nll_loss: Tensor  # log sum_{Omega_k} exp(z) - z_t, without smoothing; no gradient
    target_in_top_k: Tensor  # bool: t in Omega_k (False at padding)


class _SparseSoftmaxCrossEntropy(torch.autograd.Function):
    """Loss and hand-written backward, so the graph keeps k numbers a row, not V."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, k: int, epsilon: float,
                ignore_index: int | None, vocabulary_rule: bool):
        vocab = logits.size(-1)
        z = logits.reshape(-1, vocab)
        t = target.reshape(-1)
        if ignore_index is not None:
            pad = t.eq(ignore_index)
            t = t.masked_fill(pad, 0)  # any valid index; these rows are zeroed below
        else:
            pad = torch.zeros_like(t, dtype=torch.bool)
        values, indices = top_k(z, k)
        values = _wide(values)
        log_norm = torch.logsumexp(values, dim=-1)
        z_t = _wide(z.gather(1, t.unsqueeze(1)).squeeze(1))
        nll = log_norm - z_t
        if k >= vocab:
            in_top = torch.ones_like(pad)
        else:
            in_top = indices.eq(t.unsqueeze(1)).any(dim=1)
        n_other = min(k, vocab) - in_top.to(values.dtype)  # |C| = |Omega_k minus {t}|
        # w, the smoothing weight of each class of C (0 when C is empty)
        has_others = (n_other > 0).to(values.dtype)
        if vocabulary_rule:
            weight = has_others * (epsilon / max(vocab - 1, 1))
        else:
            weight = has_others * epsilon / n_other.clamp(min=1)
        if epsilon > 0:
            others_sum = values.sum(dim=-1) - torch.where(in_top, z_t, z_t.new_zeros(()))
            smooth = weight * (n_other * log_norm - others_sum)
            loss = (1.0 - epsilon) * nll + smooth
        else:
            loss = nll
        loss = loss.masked_fill(pad, 0.0)
        nll = nll.masked_fill(pad, 0.0)
        in_top = in_top & ~pad

        probs = torch.exp(values - log_norm.unsqueeze(1))
        ctx.save_for_backward(indices, probs, t, pad, n_other, weight)
        ctx.epsilon, ctx.shape, ctx.dtype = epsilon, z.shape, logits.dtype
        ctx.logits_shape = logits.shape
        ctx.mark_non_differentiable(nll, in_top)
        return loss.reshape(target.shape), nll.reshape(target.shape), in_top.reshape(target.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: Tensor, _grad_nll, _grad_in_top):
        indices, probs, t, pad, n_other, weight = ctx.saved_tensors
        eps = ctx.epsilon
        g = grad_loss.reshape(-1).to(probs.dtype).masked_fill(pad, 0.0)
        # dL/dz = a * p on Omega_k - (1 - eps) * e_t - w * (1 on C), with a = 1 - eps + w |C|,
        # the total weight of the smoothed target (1 under the top_k rule unless C is empty).
        kept = probs * ((1.0 - eps + weight * n_other) * g).unsqueeze(1)
        if eps > 0:
            is_other = indices.ne(t.unsqueeze(1))
            kept = kept - (weight * g).unsqueeze(1) * is_other
        grad = torch.zeros(ctx.shape, dtype=ctx.dtype, device=probs.device)
        grad.scatter_(1, indices, kept.to(ctx.dtype))
        grad.scatter_add_(1, t.unsqueeze(1), (-(1.0 - eps) * g).unsqueeze(1).to(ctx.dtype))
        return grad.reshape(ctx.logits_shape), None, None, None, None, None


def sparse_softmax_cross_entropy(
    logits: Tensor,
    target: Tensor,
    k: int,
    label_smoothing: float = 0.0,
    ignore_index: int | None = None,
    smoothing: str = "top_k",
) -> SparseSoftmaxLoss:
    """Sparse-softmax cross-entropy of ``logits`` (..., V) against ``target`` (...).

    Returns per-position tensors shaped like ``target`` (sum them for fairseq's reduction).
    Positions whose target equals ``ignore_index`` get loss 0 and no gradient. k >= V is
    ordinary (label-smoothed) cross-entropy. ``smoothing`` names how ``label_smoothing`` is
    shared among the other top-k classes: ``"top_k"`` (all of it, uniformly) or
    ``"vocabulary"`` (eps / (V - 1) each, as fairseq over the whole vocabulary); see the
    module docstring. Computes in float32 or wider; the gradient has the logits' dtype.
    """
    _check_k(k)
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label smoothing must be in [0, 1), got {label_smoothing}")
    if smoothing not in SMOOTHING_RULES:
        raise ValueError(
            f"smoothing must be one of {', '.join(SMOOTHING_RULES)}, got {smoothing!r}")
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} do not match: "
            "expected logits of shape target.shape + (V,)"
        )
    loss, nll, in_top = _SparseSoftmaxCrossEntropy.apply(
        logits, target, k, float(label_smoothing), ignore_index, smoothing == "vocabulary"
    )
    return SparseSoftmaxLoss(loss, nll, in_top)


@torch.no_grad()
def softmax_nll(logits: Tensor, target: Tensor, ignore_index: int | None = None) -> Tensor:
    """Ordinary full-softmax nll per position, logsumexp(z) - z_t, 0 at padding; no gradient.

    For logging only. Works through the rows in chunks, so it needs a temporary of about
    ``_NLL_CHUNK_ELEMENTS`` floats instead of a V-wide log-softmax of the whole batch.
    """
    vocab = logits.size(-1)
    z = logits.reshape(-1, vocab)
    t = target.reshape(-1)
    pad = t.eq(ignore_index) if ignore_index is not None else torch.zeros_like(t, dtype=torch.bool)
    t = t.masked_fill(pad, 0)
    rows = max(1, _NLL_CHUNK_ELEMENTS // max(vocab, 1))
    log_norm = torch.cat([torch.logsumexp(_wide(chunk), dim=-1) for chunk in z.split(rows)])
    nll = log_norm - _wide(z.gather(1, t.unsqueeze(1)).squeeze(1))
    return nll.masked_fill(pad, 0.0).reshape(target.shape)
