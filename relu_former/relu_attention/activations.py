"""Every attention activation the ReLUFormer paper compares, behind one function.

With z_ij = q_i . k_j / sqrt(d) over the keys j that query i may see (others get weight 0):

    softmax    w_i = softmax(z_i)                                  (vanilla Transformer)
    sparsemax  w_i = argmin_{p in simplex} ||p - z_i||^2           (Martins & Astudillo 2016)
    entmax15   w_i = 1.5-entmax(z_i)                                (Peters et al. 2019)
    relu       w_ij = ReLU(z_ij) / (gamma sqrt(n_i / 2))             (ReLUFormer, sec. 4.1)
    rela       out_i = g * RMSNorm(sum_j ReLU(z_ij) v_j)             (ReLA, Zhang et al. 2021)

    out_i = sum_j w_ij v_j for the first four. ReLA's output is normalised over the head size
    with a learned gain g; its sigmoid gate (on the layer input) belongs to the module.

sparsemax and 1.5-entmax come from the ``entmax`` package; blocked keys get a large negative
score before the mapping (sparsemax/entmax give them exactly 0) and are zeroed after it, so a
row that sees no key outputs 0 instead of NaN. Softmax-like rows are computed in float32
(float64 for float64 input), as fairseq does for softmax. Both mappings can find their
threshold among the ``partial_sort`` largest scores of a row (``torch.topk``) instead of
sorting the whole row; the package redoes with twice as many the rows whose support fills
them, so the result is exact (the same values in the same order: equal bit for bit to a full
sort). ``bind_attention`` uses it where it pays (PARTIAL_SORT).

Public functions (q, k, v (B, H, T, D); masks as in ``kernels.common``):

    ACTIVATIONS: the names accepted by ``--attention-activation``
    check_activation(name, flag="--attention-activation") -> None
        ValueError for an unknown name, ImportError when entmax is needed but missing; both
        name the flag.
    normalized_attention(q, k, v, activation, *, key_padding_mask=None, attn_mask=None,
                         dropout_p=0.0, need_weights=False, need_statistics=False,
                         query_padding_mask=None, partial_sort=None) -> AttentionResult
        softmax without weights or statistics goes through torch's fused SDPA.
    relu_attention(q, k, v, *, key_padding_mask=None, attn_mask=None, gamma=1.0,
                   backend="auto", key_chunk_size=0, dropout_p=0.0, need_weights=False,
                   need_statistics=False, query_padding_mask=None,
                   variance_reduction=True) -> AttentionResult
    rela_attention(q, k, v, gain, *, eps=1e-6, key_padding_mask=None, attn_mask=None,
                   backend="auto", key_chunk_size=0, dropout_p=0.0, need_weights=False,
                   need_statistics=False, query_padding_mask=None) -> AttentionResult
        ``backend`` is a name of ``kernels.dispatch`` or a ``BoundBackend`` already checked.
    bind_attention(activation, *, backend="auto", key_chunk_size=0,
                   variance_reduction=True, rela_eps=1e-6) -> function
        Checks every option once and returns the activation's function with them bound
        (a ``functools.partial``, so no extra call per use): ``relu_attention`` (called with
        gamma), ``rela_attention`` (called with gain) or, for the normalised activations, the
        row mapping itself (``row_mapping``: torch's softmax, or entmax's function with its
        partial sort) bound into the attention that needs whole rows; each called with
        (q, k, v, masks...). A forward so compares no activation name, imports nothing and
        probes no attribute (``tests/relu_attention/test_bound_activation.py``).

Statistics (``need_statistics``) are computed only when asked for: without them relu/rela
compute U alone and softmax runs fused.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from relu_former.errors import OptionError
from relu_former.relu_attention.kernels.common import (
    AttentionResult,
    AttentionStatistics,
    Gamma,
    count_positive,
    count_visible_keys,
    stat_dtype,
    variance_factor,
    visible_keys,
    xlogx_sum,
)
from relu_former.relu_attention.kernels.decoding_step import MAX_QUERIES as DECODING_MAX_QUERIES
from relu_former.relu_attention.kernels.decoding_step import decoding_step
from relu_former.relu_attention.kernels.dispatch import BACKENDS, BoundBackend
from relu_former.relu_attention.kernels.reference import relu_scores
from relu_former.relu_attention.regularisers import row_validity, statistics_from_sums

ACTIVATIONS = ("softmax", "relu", "sparsemax", "entmax15", "rela")
NORMALIZED = ("softmax", "sparsemax", "entmax15")
NEEDS_ENTMAX = ("sparsemax", "entmax15")
# How many of a row's largest scores the bound activation sorts to find its threshold.
# Sparsemax supports are short (a mean of 3-28 keys, at most 62, for scores of standard
# deviation 0.1-2 over 128-1024 keys), and a full sort costs 1.2-1.4x (128 keys) to 2.3-3x
# (1024 keys) a top-64 (scripts/benchmarks/bench_sparsemax.py); rows whose support needs more
# are redone.
# 1.5-entmax keeps the full sort: on the flat scores of early training its support fills most of
# the row, where the doubling (64, 128, ... keys) costs up to 2.3x one full sort.
PARTIAL_SORT = {"sparsemax": 64}
# The backends that apply the variance factor inside their tiles (read once, not per call).
SCALES_ROWS = frozenset(kernel for kernel in BACKENDS.values()
                        if getattr(kernel, "scales_rows", False))


def check_activation(name: str, flag: str = "--attention-activation") -> None:
    """Fail early, naming ``flag``, for an unknown activation or a missing entmax package."""
    if name not in ACTIVATIONS:
        raise OptionError(flag, f"{flag} {name!r} is unknown; choose one of "
                          f"{', '.join(ACTIVATIONS)}")
    if name in NEEDS_ENTMAX:
        try:
            import entmax  # noqa: F401
        except ImportError as err:
            raise ImportError(
                f"{flag} {name} needs the 'entmax' package, which is not installed: "
                "pip install -c constraints.txt entmax (or choose softmax, relu or rela)"
            ) from err


def row_mapping(activation: str, partial_sort: int | None = None) -> Callable[[Tensor], Tensor]:
    """The function a normalised ``activation`` maps a row of scores with (over the last
    dimension): torch's softmax, or entmax's sparsemax/entmax15 sorting the ``partial_sort``
    largest scores first (None: the whole row)."""
    if activation not in NORMALIZED:
        raise ValueError(f"row_mapping: {activation!r} is not one of {NORMALIZED}")
    check_activation(activation)
    if activation == "softmax":
        return functools.partial(torch.softmax, dim=-1)
    import entmax

    return functools.partial(getattr(entmax, activation), dim=-1, k=partial_sort)


def _masked_value(dtype: torch.dtype) -> float:
    # Finite, so a row with every key blocked stays finite; far below any real score.
    return -1e4 if dtype == torch.float16 else -1e9


def normalized_attention(q: Tensor, k: Tensor, v: Tensor, activation: str = "softmax", *,
                         partial_sort: int | None = None, **options: Any) -> AttentionResult:
    """Softmax, sparsemax or 1.5-entmax attention; weights and statistics of the used rows.

    Softmax with neither weights nor statistics asked for runs through torch's fused
    ``scaled_dot_product_attention`` (what fairseq's own module uses); everything else
    materialises the weights. ``partial_sort``: how many of a row's largest scores sparsemax
    and entmax15 sort first (None: the whole row; the result is the same either way).
    ``options``: the masks, ``dropout_p``, ``need_weights``, ``need_statistics`` and
    ``query_padding_mask`` of :func:`mapped_attention`, which a bound module calls directly.
    """
    return mapped_attention(q, k, v, row_mapping(activation, partial_sort),
                            fused_softmax=activation == "softmax", **options)


def mapped_attention(q: Tensor, k: Tensor, v: Tensor, mapping: Callable[[Tensor], Tensor], *,
                     fused_softmax: bool = False, key_padding_mask: Tensor | None = None,
                     attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                     need_weights: bool = False, need_statistics: bool = False,
                     query_padding_mask: Tensor | None = None) -> AttentionResult:
    """Attention whose rows of scores are mapped to weights by ``mapping`` (a
    :func:`row_mapping`); ``fused_softmax``: ``mapping`` is softmax, so that a call wanting
    neither weights nor statistics can run fused."""
    if fused_softmax and not need_weights and not need_statistics:
        return AttentionResult(_fused_softmax(q, k, v, key_padding_mask, attn_mask, dropout_p),
                               None, None)
    work_dtype = stat_dtype(q)
    scores = torch.matmul(q * q.size(-1) ** -0.5, k.transpose(-1, -2)).to(work_dtype)
    visible = visible_keys(key_padding_mask, attn_mask)
    if visible is not None:
        scores = scores.masked_fill(~visible, _masked_value(work_dtype))
    weights = mapping(scores)
    if visible is not None:
        weights = weights.masked_fill(~visible, 0.0)
    weights = weights.to(q.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, v)

    statistics = None
    if need_statistics:
        with torch.no_grad():
            statistics = _normalized_statistics(weights, key_padding_mask, attn_mask,
                                                query_padding_mask)
    return AttentionResult(out, weights if need_weights else None, statistics)


def _fused_softmax(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None,
                   attn_mask: Tensor | None, dropout_p: float) -> Tensor:
    """softmax(q k^T / sqrt(d)) v by SDPA; rows that see no key output 0, as the eager path.

    Blocked keys get the eager path's finite score (``_masked_value``) rather than -inf, so a
    row with every key blocked is finite (uniform) inside SDPA and is zeroed here after it.
    """
    visible = visible_keys(key_padding_mask, attn_mask)
    if visible is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    bias = torch.zeros(visible.shape, dtype=q.dtype, device=q.device)
    bias.masked_fill_(~visible, _masked_value(q.dtype))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
    n = count_visible_keys(key_padding_mask, attn_mask, q.size(-2), k.size(-2))
    return out * (n > 0).to(out.dtype).unsqueeze(-1)


def _normalized_statistics(weights: Tensor, key_padding_mask: Tensor | None,
                           attn_mask: Tensor | None,
                           query_padding_mask: Tensor | None) -> AttentionStatistics:
    batch, heads, tgt_len, src_len = weights.shape
    stat_dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    w = weights.to(stat_dtype)
    n = count_visible_keys(key_padding_mask, attn_mask, tgt_len, src_len)
    n = n.to(device=w.device, dtype=stat_dtype)
    n, valid = row_validity(n, (batch, heads, tgt_len), query_padding_mask)
    row_sum = w.sum(-1)
    xlogx = xlogx_sum(w)
    zeros = n - count_positive(w, stat_dtype)
    return statistics_from_sums(row_sum, xlogx, zeros, n, valid, regularizable=False)


# Weights asked for with grad enabled come from the dense reference backend (with gradient,
# e.g. for an alignment loss); without grad they are recomputed after the pass.
DENSE = BoundBackend("reference")


def _kernel(backend: str | BoundBackend, key_chunk_size: int, q: Tensor, dropout_p: float,
            need_weights: bool) -> Callable[..., Any]:
    if need_weights and torch.is_grad_enabled():
        backend = DENSE
    elif not isinstance(backend, BoundBackend):
        backend = BoundBackend(backend, key_chunk_size)
    return backend.kernel(q, dropout_p)


def _row_statistics(sums, n: Tensor, shape: Tuple[int, int, int],
                    query_padding_mask: Tensor | None,
                    regularizable: bool) -> AttentionStatistics:
    n_rows, valid = row_validity(n, shape, query_padding_mask)
    return statistics_from_sums(sums.row_sum, sums.xlogx, n_rows - sums.positives, n_rows,
                                valid, regularizable=regularizable)


def relu_attention(q: Tensor, k: Tensor, v: Tensor, *,
                   key_padding_mask: Tensor | None = None,
                   attn_mask: Tensor | None = None, gamma: Gamma = 1.0,
                   backend: str | BoundBackend = "auto", key_chunk_size: int = 0,
                   dropout_p: float = 0.0,
                   need_weights: bool = False, need_statistics: bool = False,
                   query_padding_mask: Tensor | None = None,
                   variance_reduction: bool = True) -> AttentionResult:
    """ReLU attention (ReLUFormer section 4.1): out_i = sum_j s_ij v_j / (gamma sqrt(n_i/2)).

    ``backend``/``key_chunk_size`` as in ``kernels.dispatch``. ``dropout_p`` drops score
    entries before the values are summed (pass 0 in evaluation); the statistics and returned
    weights are those of the undropped scores, and are computed only when asked for.
    ``query_padding_mask`` (B, Tq) only excludes padded queries from the statistics.
    ``variance_reduction=False`` drops the 1/(gamma sqrt(n/2)) factor (for the ablation).
    Returned weights s_ij / (gamma sqrt(n_i/2)) are exactly the coefficients applied to v.
    """
    batch, heads, tgt_len, _ = q.shape
    n, factor = _row_factor(key_padding_mask, attn_mask, q, k.size(-2), gamma,
                            variance_reduction, need_statistics)
    if (tgt_len <= DECODING_MAX_QUERIES and not dropout_p and not need_statistics
            and not need_weights and not torch.is_grad_enabled()):
        # a decoding step: two small products beat any tiled kernel's set-up
        out = decoding_step(q, k, v, row_scale=factor, key_padding_mask=key_padding_mask,
                            attn_mask=attn_mask)
        return AttentionResult(out, None, None)
    kernel = _kernel(backend, key_chunk_size, q, dropout_p, need_weights)
    masks = dict(key_padding_mask=key_padding_mask, attn_mask=attn_mask, dropout_p=dropout_p)
    if (kernel in SCALES_ROWS and not need_statistics
            and not (isinstance(factor, Tensor) and factor.requires_grad)):
        # the kernel applies the factor inside its tiles (no pass over the output)
        sums = kernel(q, k, v, **masks, need_sums=False, row_scale=factor)
        out = sums.u
    else:
        sums = kernel(q, k, v, **masks, need_sums=need_statistics)
        out = sums.u * factor
    weights = None
    if need_weights:
        s = sums.scores
        if s is None:  # not the dense reference: recomputed, without gradient
            with torch.no_grad():
                s = relu_scores(q * q.size(-1) ** -0.5, k,
                                visible_keys(key_padding_mask, attn_mask))
        weights = s * factor
    statistics = None
    if need_statistics:
        statistics = _row_statistics(sums, n, (batch, heads, tgt_len), query_padding_mask,
                                     regularizable=True)
    return AttentionResult(out, weights, statistics)


def _row_factor(key_padding_mask: Tensor | None, attn_mask: Tensor | None, q: Tensor,
                src_len: int, gamma: Gamma, variance_reduction: bool,
                need_counts: bool) -> Tuple[Tensor | None, Tensor | float]:
    """n_i (only when a mask or the statistics need it) and the factor 1/(gamma sqrt(n_i/2))
    to multiply the (B, H, Tq, D) sums by: a plain number where every row sees every key and
    gamma is fixed (the common case of cross-attention and decoding steps), else a tensor."""
    if not need_counts and key_padding_mask is None and attn_mask is None:
        if not variance_reduction:
            return None, 1.0
        if not isinstance(gamma, Tensor):
            return None, 1.0 / (gamma * math.sqrt(max(src_len, 1) / 2))
    n = count_visible_keys(key_padding_mask, attn_mask, q.size(2), src_len)
    n = n.to(device=q.device, dtype=stat_dtype(q))
    factor = variance_factor(n, gamma) if variance_reduction else torch.ones_like(n)
    return n, factor.unsqueeze(-1).to(q.dtype)


def rela_attention(q: Tensor, k: Tensor, v: Tensor, gain: Tensor, *, eps: float = 1e-6,
                   key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
                   backend: str | BoundBackend = "auto", key_chunk_size: int = 0,
                   dropout_p: float = 0.0, need_weights: bool = False,
                   need_statistics: bool = False,
                   query_padding_mask: Tensor | None = None) -> AttentionResult:
    """ReLA: ReLU scores without the variance factor, RMS-normalised output times ``gain``.

    ``gain`` broadcasts against (B, H, Tq, D), e.g. shape (H, 1, D). Returned weights are the
    ReLU scores s_ij (the RMS normalisation rescales each output dimension afterwards).
    The statistics are those of s (logged; ReLA is not regularised).
    """
    batch, heads, tgt_len, _ = q.shape
    kernel = _kernel(backend, key_chunk_size, q, dropout_p, need_weights)
    sums = kernel(q, k, v, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                  dropout_p=dropout_p, need_sums=need_statistics)
    u = sums.u
    out = u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps) * gain
    weights = sums.scores
    if need_weights and weights is None:
        with torch.no_grad():
            weights = relu_scores(q * q.size(-1) ** -0.5, k,
                                  visible_keys(key_padding_mask, attn_mask))
    statistics = None
    if need_statistics:
        n = count_visible_keys(key_padding_mask, attn_mask, tgt_len, k.size(-2))
        n = n.to(device=q.device, dtype=sums.row_sum.dtype)
        statistics = _row_statistics(sums, n, (batch, heads, tgt_len), query_padding_mask,
                                     regularizable=False)
    return AttentionResult(out, weights if need_weights else None, statistics)


def bind_attention(activation: str, *, backend: str = "auto", key_chunk_size: int = 0,
                   variance_reduction: bool = True,
                   rela_eps: float = 1e-6) -> Callable[..., AttentionResult]:
    """The attention function of ``activation`` with its options checked and bound once.

    relu is then called as f(q, k, v, gamma=..., **masks), rela as f(q, k, v, gain, **masks),
    the normalised activations as f(q, k, v, **masks); the tensors (a learned gamma, ReLA's
    gain) are passed per call, so a copied or moved module never holds stale ones.
    """
    check_activation(activation)
    bound = BoundBackend(backend, key_chunk_size)  # the backend's one check, for every activation
    if activation in NORMALIZED:
        return functools.partial(mapped_attention,
                                 mapping=row_mapping(activation, PARTIAL_SORT.get(activation)),
                                 fused_softmax=activation == "softmax")
    if activation == "relu":
        return functools.partial(relu_attention, backend=bound,
                                 variance_reduction=variance_reduction)
    return functools.partial(rela_attention, backend=bound, eps=rela_eps)
