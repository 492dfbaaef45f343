"""ReLUFormer's attention regularisers, added to a task loss (DESIGN.md §2.2).

For every attention row i (a query of one head in one layer), with S_i = sum_j s_ij the sum of
its ReLU scores, H_i the entropy of p_ij = s_ij / S_i and n_i the number of keys it may see:

    L_norm = mean_i |log S_i|                      (pushes row sums toward 1)
    L_ent  = mean_i max(H_i - C * log n_i, 0)      (C = --attention-entropy-margin)
    L      = L_task + lambda_norm * L_norm + lambda_ent * L_ent

The mean runs over the real query rows of every regularisable attention module of the model
(ReLU attention; softmax-like activations are normalised already). fairseq sums the task loss
over ``sample_size`` tokens, so the regularisers are multiplied by ``sample_size``: a weight
lambda then means "lambda per target token", the same whatever the batch size.

The modules record their per-row statistics during the forward pass (``attention_statistics()``,
see ``relu_former.modules.attention``); this file turns them into the losses and log figures.
Criteria other than the one registered here reuse the same mechanism by calling
``add_attention_regularizers`` after computing their own loss and ``reduce_attention_metrics``
from their ``reduce_metrics``, and by adding ``AttentionRegularizerConfig``'s fields to their
config (inherit from it).

Rows whose ReLU scores are all zero (S_i = 0) contribute |log max(S_i, eps)| with
eps = ``ROW_SUM_EPS`` (a constant, so no gradient flows through them) and entropy 0; no NaN.
"""


import functools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics

logger = logging.getLogger(__name__)

# |log S_i| is evaluated at max(S_i, ROW_SUM_EPS): a row with no positive score gets a finite,
# constant penalty instead of inf (and zero gradient, since nothing can move it).
ROW_SUM_EPS = 1e-6

# Keys this module writes into fairseq's logging_output (summed over workers by fairseq).
_LOG_KEYS = (
    "attn_rows", "attn_entropy_sum", "attn_row_sum_sum", "attn_zero_count", "attn_key_count",
    "attn_reg_rows", "attn_norm_loss", "attn_entropy_loss",
)  # fmt: skip


@dataclass
class AttentionRegularizerConfig(FairseqDataclass):
    """Weights of the attention regularisers; inherit from it to add them to a criterion.

    The paper's weights could not be verified; our defaults are 0.1 each, a choice that keeps
    either term well below the cross-entropy at initialisation. Set a weight to 0 to only log.
    """

    attention_norm_loss_weight: float = field(
        default=0.1,
        metadata={"help": "weight lambda_norm of L_norm = mean |log S_i| (per target token); "
                  "0 disables it"},
    )
    attention_entropy_loss_weight: float = field(
        default=0.1,
        metadata={"help": "weight lambda_ent of L_ent = mean max(H_i - C log n_i, 0) "
                  "(per target token); 0 disables it"},
    )
    attention_entropy_margin: float = field(
        default=0.7,
        metadata={"help": "C in L_ent: the entropy a row may have for free, as a share of the "
                  "uniform entropy log n_i"},
    )


def check_attention_regularizer_config(cfg: Any) -> None:
    """Raise a ValueError naming the flag when a regulariser setting is out of range."""
    for name in ("attention_norm_loss_weight", "attention_entropy_loss_weight",
                 "attention_entropy_margin"):
        value = getattr(cfg, name)
        if value is None or not math.isfinite(value) or value < 0:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be a finite number >= 0, got {value}")


def collect_attention_statistics(model: torch.nn.Module) -> List[Any]:
    """The statistics every attention module of ``model`` recorded in its last forward pass."""
    found = []
    for module in model.modules():
        getter = getattr(module, "attention_statistics", None)
        if callable(getter):
            stats = getter()
            if stats is not None:
                found.append(stats)
    return found


def attention_regularizer_terms(statistics: Sequence[Any], margin: float) -> Dict[str, Any]:
    """Pool the rows of all modules: the two losses (means over rows) and the log sums.

    Returns a dict with ``norm_loss`` and ``entropy_loss`` (scalar tensors with gradient, means
    over the rows of regularisable modules; None when there is none) and float sums for the
    log. The log sums cross to the host in one transfer, so a GPU waits once per batch.
    """
    norm_sum, ent_sum, reg_rows = None, None, None
    sums = []
    for stats in statistics:
        valid = stats.valid
        with torch.no_grad():
            rows = valid.sum().to(stats.row_sum.dtype)
            sums.append(torch.stack([
                rows,
                stats.entropy.detach().masked_select(valid).sum(),
                stats.row_sum.detach().masked_select(valid).sum(),
                stats.zeros.masked_select(valid).sum().to(rows.dtype),
                stats.n.masked_select(valid).sum().to(rows.dtype),
            ]).float())
        if not stats.regularizable:
            continue
        zero = torch.zeros((), dtype=stats.row_sum.dtype, device=stats.row_sum.device)
        norm_rows = stats.row_sum.clamp(min=ROW_SUM_EPS).log().abs()
        margin_rows = margin * stats.n.clamp(min=1).log()
        ent_rows = (stats.entropy - margin_rows).clamp(min=0)
        norm_part = torch.where(valid, norm_rows, zero).sum()
        ent_part = torch.where(valid, ent_rows, zero).sum()
        norm_sum = norm_part if norm_sum is None else norm_sum + norm_part
        ent_sum = ent_part if ent_sum is None else ent_sum + ent_part
        reg_rows = rows if reg_rows is None else reg_rows + rows
    totals = torch.stack(sums).sum(0) if sums else torch.zeros(5)
    if reg_rows is not None:
        totals = torch.cat([totals, reg_rows.float().reshape(1).to(totals.device)])
    values = totals.tolist() + ([] if reg_rows is not None else [0.0])
    terms: Dict[str, Any] = dict(zip(_LOG_KEYS[:6], values))
    denominator = reg_rows.clamp(min=1) if reg_rows is not None else None
    terms["norm_loss"] = norm_sum / denominator if norm_sum is not None else None
    terms["entropy_loss"] = ent_sum / denominator if ent_sum is not None else None
    return terms


def add_attention_regularizers(model: torch.nn.Module, loss: torch.Tensor, sample_size: float,
                               logging_output: Dict[str, Any], cfg: Any) -> torch.Tensor:
    """Add lambda-weighted L_norm and L_ent to ``loss`` and log the attention statistics.

    ``cfg`` has the fields of ``AttentionRegularizerConfig``. The losses are means over rows
    times ``sample_size`` (fairseq's gradient denominator), so lambda is per target token.
    Writes sums into ``logging_output`` for ``reduce_attention_metrics``; when the model
    recorded nothing (evaluation mode), ``loss`` is returned unchanged.
    """
    statistics = collect_attention_statistics(model)
    if not statistics:
        return loss
    terms = attention_regularizer_terms(statistics, cfg.attention_entropy_margin)
    for key in _LOG_KEYS[:6]:
        logging_output[key] = terms[key]
    for name, weight in (("norm_loss", cfg.attention_norm_loss_weight),
                         ("entropy_loss", cfg.attention_entropy_loss_weight)):
        value = terms[name]
        if value is None:
            continue
        scaled = value * sample_size
        logging_output[f"attn_{name}"] = scaled.detach()
        if weight > 0:
            if loss.requires_grad and not scaled.requires_grad:
                _warn_no_gradient()
            loss = loss + weight * scaled
    return loss


@functools.lru_cache(maxsize=None)
def _warn_no_gradient() -> None:
    """Warn once per process (lru_cache) that the regularisers cannot train the model."""
    logger.warning(
        "the attention regularisers carry no gradient (the attention ran without autograd, "
        "e.g. under --checkpoint-activations); they are logged but do not train the model")


def reduce_attention_metrics(logging_outputs: Sequence[Dict[str, Any]]) -> None:
    """Log attention entropy, zero share, mean row sum and the two losses (per token)."""

    def total(key: str) -> float:
        return sum(log.get(key, 0) for log in logging_outputs)

    rows = total("attn_rows")
    if rows == 0:
        return
    metrics.log_scalar("attn_entropy", total("attn_entropy_sum") / rows, rows, round=3)
    metrics.log_scalar("attn_row_sum", total("attn_row_sum_sum") / rows, rows, round=3)
    keys = total("attn_key_count")
    if keys > 0:
        metrics.log_scalar("attn_zero_share", total("attn_zero_count") / keys, keys, round=3)
    sample_size = total("sample_size")
    if total("attn_reg_rows") > 0 and sample_size > 0:
        for name in ("norm_loss", "entropy_loss"):
            metrics.log_scalar(f"attn_{name}", total(f"attn_{name}") / sample_size,
                               sample_size, round=4)


@dataclass
class RegularizedLabelSmoothedCrossEntropyConfig(
    LabelSmoothedCrossEntropyCriterionConfig, AttentionRegularizerConfig
):
    pass


@register_criterion(
    "regularized_label_smoothed_cross_entropy",
    dataclass=RegularizedLabelSmoothedCrossEntropyConfig,
)
class RegularizedLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed cross-entropy plus ReLUFormer's attention regularisers."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, attention_norm_loss_weight=0.1,
                 attention_entropy_loss_weight=0.1, attention_entropy_margin=0.7):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size,
                         report_accuracy)
        self.regularizer_cfg = AttentionRegularizerConfig(
            attention_norm_loss_weight=attention_norm_loss_weight,
            attention_entropy_loss_weight=attention_entropy_loss_weight,
            attention_entropy_margin=attention_entropy_margin,
        )
        check_attention_regularizer_config(self.regularizer_cfg)

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        loss = add_attention_regularizers(model, loss, sample_size, logging_output,
                                          self.regularizer_cfg)
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        reduce_attention_metrics(logging_outputs)
