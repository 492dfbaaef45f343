"""ReLUFormer's attention regularisers and the entropy they read, in torch alone.

ReLUFormer (Shen et al. 2023, "A Study on ReLU and Softmax in Transformer", section 4.2;
restated in docs/relu_former.md). For an attention row i with ReLU scores s_ij over its n_i
visible keys, S_i = sum_j s_ij, T_i = sum_j s_ij log s_ij and p_ij = s_ij / S_i:

    H_i    = -sum_j p_ij log p_ij = log S_i - T_i / S_i      (H_i := 0 when S_i = 0)
    L_norm = mean_i |log S_i|                                 (pushes row sums toward 1)
    L_ent  = mean_i max(C log n_i - H_i, 0)                   (side "below")
             mean_i max(H_i - C log n_i, 0)                   (side "above")

The means run over the valid rows (real queries that see a key) of every regularisable
attention call (ReLU attention). Rows with S_i = 0 contribute |log max(S_i, eps)| with
eps = ``ROW_SUM_EPS`` (constant, so no gradient) and entropy 0; no NaN.

This module needs no fairseq: ``criterions/regularized.py`` is the fairseq glue over it, and
the analysis scripts compute the same figures from it.

Public:

    entropy_from_sums(S, T) -> H
    statistics_from_sums(S, T, zeros, n, valid, regularizable) -> AttentionStatistics
    row_validity(n, (B, H, Tq), query_padding_mask) -> (n, valid)
    norm_rows(S) -> |log max(S, eps)|          entropy_margin_rows(H, n, C, side) -> L_ent rows
    regularizer_terms(statistics, margin, side) -> {norm_loss, entropy_loss, LOG_KEYS sums}
"""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import torch
from torch import Tensor

from relu_former.relu_attention.kernels.common import AttentionStatistics

# |log S_i| is evaluated at max(S_i, ROW_SUM_EPS): a row with no positive score gets a finite,
# constant penalty instead of inf (and zero gradient, since nothing can move it).
ROW_SUM_EPS = 1e-6

MARGIN_SIDES = ("below", "above")

# The sums ``regularizer_terms`` returns for the log, besides the two losses.
LOG_KEYS = ("attn_rows", "attn_entropy_sum", "attn_row_sum_sum", "attn_zero_count",
            "attn_key_count", "attn_reg_rows")


def entropy_from_sums(row_sum: Tensor, xlogx: Tensor) -> Tensor:
    """H_i = log S_i - T_i / S_i (section 4.2), 0 where S_i = 0, with finite gradients; NaN
    where S_i is NaN (a diverged row is not an empty one)."""
    positive = ~(row_sum <= 0)
    safe = torch.where(positive, row_sum, torch.ones_like(row_sum))
    return torch.where(positive, torch.log(safe) - xlogx / safe, torch.zeros_like(safe))


def statistics_from_sums(row_sum: Tensor, xlogx: Tensor, zeros: Tensor, n: Tensor,
                         valid: Tensor, regularizable: bool) -> AttentionStatistics:
    """The figures of ``AttentionStatistics``; detached unless ``regularizable``."""
    entropy = entropy_from_sums(row_sum, xlogx)
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


def norm_rows(row_sum: Tensor) -> Tensor:
    """Per-row L_norm: |log max(S_i, ROW_SUM_EPS)|."""
    return row_sum.clamp(min=ROW_SUM_EPS).log().abs()


def entropy_margin_rows(entropy: Tensor, n: Tensor, margin: float, side: str) -> Tensor:
    """Per-row L_ent: max(C log n - H, 0) (side below) or max(H - C log n, 0) (above)."""
    if side not in MARGIN_SIDES:
        raise ValueError(f"side must be one of {MARGIN_SIDES}, got {side!r}")
    bound = margin * n.clamp(min=1).log()
    gap = bound - entropy if side == "below" else entropy - bound
    return gap.clamp(min=0)


def _log_sums(statistics: Sequence[AttentionStatistics]) -> Dict[str, float]:
    """The LOG_KEYS sums over every call's valid rows, crossing to the host in one transfer."""
    sums: Dict[str, Tensor] = {}

    def add(key: str, value: Tensor) -> None:
        value = value.detach().float().reshape(())
        sums[key] = value if key not in sums else sums[key] + value.to(sums[key].device)

    for stats in statistics:
        valid = stats.valid
        add("attn_rows", valid.sum())
        add("attn_entropy_sum", stats.entropy.masked_select(valid).sum())
        add("attn_row_sum_sum", stats.row_sum.masked_select(valid).sum())
        add("attn_zero_count", stats.zeros.masked_select(valid).sum())
        add("attn_key_count", stats.n.masked_select(valid).sum())
        if stats.regularizable:
            add("attn_reg_rows", valid.sum())
    names = list(sums)
    values = torch.stack([sums[key] for key in names]).tolist() if names else []
    logged = {key: 0.0 for key in LOG_KEYS}
    logged.update(zip(names, values))
    return logged


def regularizer_terms(statistics: Sequence[AttentionStatistics], margin: float,
                      side: str = "below") -> Dict[str, Any]:
    """Pool the rows of all calls: ``norm_loss``, ``entropy_loss`` and the LOG_KEYS sums.

    The losses are scalar tensors with gradient, means over the valid rows of regularisable
    calls (None when there is none); the log sums are floats.
    """
    norm_sum = ent_sum = rows = None
    for stats in statistics:
        if not stats.regularizable:
            continue
        valid = stats.valid
        zero = torch.zeros((), dtype=stats.row_sum.dtype, device=stats.row_sum.device)
        ent = entropy_margin_rows(stats.entropy, stats.n, margin, side)
        norm_part = torch.where(valid, norm_rows(stats.row_sum), zero).sum()
        ent_part = torch.where(valid, ent, zero).sum()
        norm_sum = norm_part if norm_sum is None else norm_sum + norm_part
        ent_sum = ent_part if ent_sum is None else ent_sum + ent_part
        rows = valid.sum() if rows is None else rows + valid.sum()
    terms: Dict[str, Any] = dict(_log_sums(statistics))
    denominator = rows.clamp(min=1).to(norm_sum.dtype) if rows is not None else None
    terms["norm_loss"] = norm_sum / denominator if norm_sum is not None else None
    terms["entropy_loss"] = ent_sum / denominator if ent_sum is not None else None
    return terms
