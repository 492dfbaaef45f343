r"""nCCS: how well pooled vectors approximate the true top-k vectors (Pietruszka et al., ACL 2022).

For each of the k true top-k input vectors :math:`t_i` (hard top-k by score), take the best cosine
similarity with any pooled vector :math:`p_j`, and average:

.. math::
    \mathrm{nCCS} = \frac{1}{k} \sum_{i=1}^{k} \max_j \cos(t_i, p_j).

1 means every true top-k vector has an exact (up to scale) copy among the pooled ones; order does
not matter. Padded targets (examples with fewer than k real items) and padded pooled slots are
left out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from scripts.benchmarks.topk_baselines import hard_topk

_TARGET_BLOCK = 256


def _best_cosine(cos: Tensor, pooled_padding_mask: Tensor | None) -> Tensor:
    """Best cosine over the pooled slots [B, t, p] -> [B, t]; no real slot at all counts -1."""
    if pooled_padding_mask is not None:
        cos = cos.masked_fill(pooled_padding_mask.unsqueeze(1), float("-inf"))
    return cos.max(-1).values.clamp(min=-1.0)


def ncc_similarity(
    pooled: Tensor,
    values: Tensor,
    scores: Tensor,
    k: int,
    padding_mask: Tensor | None = None,
    pooled_padding_mask: Tensor | None = None,
    reduction: str = "mean",
) -> Tensor:
    """nCCS of ``pooled`` [B, p, d] against the hard top-k of (``values`` [B, n, d], ``scores``).

    Returns the mean over examples (``reduction="mean"``) or one value per example ("none").
    """
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    batch, _, dim = values.shape
    if pooled.dim() != 3 or (pooled.shape[0], pooled.shape[2]) != (batch, dim):
        raise ValueError(
            f"pooled must be [batch, slots, dim] matching values {tuple(values.shape)}, "
            f"got {tuple(pooled.shape)}"
        )
    target = hard_topk(values, scores, k, padding_mask)
    with torch.no_grad():
        targets = F.normalize(target.values.double(), dim=-1)
        candidates = F.normalize(pooled.double(), dim=-1).transpose(1, 2)  # [B, d, p]
        # Cosines [B, k', p] a block of targets at a time, so k' = p = 2048 stays small.
        best = torch.cat(
            [
                _best_cosine(targets[:, t0 : t0 + _TARGET_BLOCK] @ candidates, pooled_padding_mask)
                for t0 in range(0, targets.shape[1], _TARGET_BLOCK)
            ],
            1,
        ).masked_fill(target.padding_mask, 0.0)
        counted = (~target.padding_mask).sum(1).clamp(min=1)
        per_example = best.sum(1) / counted
    return per_example.mean() if reduction == "mean" else per_example
