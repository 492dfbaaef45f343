"""ReLUFormer's attention regularisers, added to a task loss (the ReLUFormer paper, section 4.2).

For every attention row i (a query of one head in one layer), with S_i the sum of its ReLU
scores s_ij (or, under ``--attention-norm-row-sum weights``, of the weights applied to the
values), H_i the entropy of p_ij = s_ij / S_i and n_i the number of keys it may see:

    L_norm = mean_i |log S_i|                          (pushes row sums toward 1)
    L_ent  = mean_i max(C log n_i - H_i, 0)            (--attention-entropy-margin-side below)
             mean_i max(H_i - C log n_i, 0)            (--attention-entropy-margin-side above)
    L      = L_task + lambda_norm * L_norm + lambda_ent * L_ent

C is ``--attention-entropy-margin``. The mean runs over the real query rows of every
regularisable attention module of the model (ReLU attention; softmax-like activations are
normalised already). fairseq sums the task loss over ``sample_size`` tokens, so the
regularisers are multiplied by ``sample_size``: a weight lambda then means "lambda per target
token", the same whatever the batch size.

The modules record their per-row statistics during the forward pass (``attention_statistics()``,
see ``relu_former.relu_attention.attention``); this file turns them into the losses and log figures.
Criteria other than the one registered here reuse the same mechanism by adding
``AttentionRegularizerConfig``'s fields to their config (inherit from it), calling
``add_attention_regularizers`` after computing their own loss and
``reduce_attention_metrics`` from their ``reduce_metrics``.

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
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics

from relu_former.errors import OptionError

logger = logging.getLogger(__name__)

# |log S_i| is evaluated at max(S_i, ROW_SUM_EPS): a row with no positive score gets a finite,
# constant penalty instead of inf (and zero gradient, since nothing can move it).
ROW_SUM_EPS = 1e-6

# The sums this module writes into fairseq's logging_output (summed over workers by fairseq),
# besides attn_norm_loss and attn_entropy_loss.
LOG_KEYS = ("attn_rows", "attn_entropy_sum", "attn_row_sum_sum", "attn_zero_count",
            "attn_key_count", "attn_reg_rows")


MARGIN_SIDES = ("below", "above")
NORM_ROW_SUMS = ("scores", "weights")


@dataclass
class AttentionRegularizerConfig(FairseqDataclass):
    """Weights and readings of the attention regularisers; inherit from it to add them.

    The paper's weights could not be verified; our defaults are 0.1 each, a choice that keeps
    either term well below the cross-entropy at initialisation. Set a weight to 0 to only log.
    The defaults of the two readings the paper leaves open (the margin's side, the row sum the
    normalisation sees) are argued, with measurements, in docs/relu_former.md.
    """

    attention_norm_loss_weight: float = field(
        default=0.1,
        metadata={"help": "weight lambda_norm of L_norm = mean |log S_i| (per target token); "
                  "0 disables it"},
    )
    attention_entropy_loss_weight: float = field(
        default=0.1,
        metadata={"help": "weight lambda_ent of the entropy-margin loss L_ent (per target "
                  "token); 0 disables it"},
    )
    attention_entropy_margin: float = field(
        default=0.7,
        metadata={"help": "C in L_ent: the margin C log n_i, as a share of the uniform entropy "
                  "log n_i (the paper's 0.7)"},
    )
    attention_entropy_margin_side: ChoiceEnum(MARGIN_SIDES) = field(
        default="below",
        metadata={"help": "which side of C log n_i L_ent penalises: below = "
                  "max(C log n_i - H_i, 0), flattens sparse rows (default); above = "
                  "max(H_i - C log n_i, 0), an upper bound that sharpens flat rows"},
    )
    attention_norm_row_sum: ChoiceEnum(NORM_ROW_SUMS) = field(
        default="scores",
        metadata={"help": "the row sum S_i of L_norm: scores = sum of the ReLU scores, before "
                  "the variance factor (default); weights = sum of the weights applied to "
                  "the values, after it"},
    )


def _choice(cfg: Any, name: str, choices: Sequence[str]) -> str:
    """A ChoiceEnum field as a plain string, or an OptionError naming its flag."""
    value = getattr(cfg, name, None)
    value = str(value) if value is not None else None
    if value not in choices:
        flag = "--" + name.replace("_", "-")
        raise OptionError(flag, f"{flag} must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_attention_regularizer_config(cfg: Any) -> None:
    """Raise an OptionError naming the flag when a regulariser setting is out of range."""
    for name in ("attention_norm_loss_weight", "attention_entropy_loss_weight",
                 "attention_entropy_margin"):
        value = getattr(cfg, name)
        if value is None or not math.isfinite(value) or value < 0:
            flag = "--" + name.replace("_", "-")
            raise OptionError(flag, f"{flag} must be a finite number >= 0, got {value}")
    _choice(cfg, "attention_entropy_margin_side", MARGIN_SIDES)
    _choice(cfg, "attention_norm_row_sum", NORM_ROW_SUMS)


def collect_attention_statistics(model: torch.nn.Module, row_sum: str = "scores") -> List[Any]:
    """The statistics every attention module of ``model`` recorded in its last forward pass.

    ``row_sum`` is passed to each module's ``attention_statistics`` (scores or weights).
    """
    found = []
    for module in model.modules():
        getter = getattr(module, "attention_statistics", None)
        if callable(getter):
            stats = getter(row_sum=row_sum)
            if stats is not None:
                found.append(stats)
    return found


def entropy_margin_rows(entropy: torch.Tensor, n: torch.Tensor, margin: float,
                        side: str) -> torch.Tensor:
    """Per-row L_ent: max(C log n - H, 0) (side below) or max(H - C log n, 0) (above)."""
    bound = margin * n.clamp(min=1).log()
    gap = bound - entropy if side == "below" else entropy - bound
    return gap.clamp(min=0)


def norm_rows(row_sum: torch.Tensor) -> torch.Tensor:
    """Per-row L_norm: |log max(S_i, ROW_SUM_EPS)|."""
    return row_sum.clamp(min=ROW_SUM_EPS).log().abs()


def attention_regularizer_terms(statistics: Sequence[Any], margin: float,
                                side: str = "below") -> Dict[str, Any]:
    """Pool the rows of all modules: the two losses (means over rows) and the log sums.

    Returns a dict with ``norm_loss`` and ``entropy_loss`` (scalar tensors with gradient, means
    over the rows of regularisable modules; None when there is none) and, under the keys of
    ``LOG_KEYS``, float sums for the log. The log sums cross to the host in one transfer, so a
    GPU waits once per batch.
    """
    sums: Dict[str, torch.Tensor] = {}

    def add(key: str, value: torch.Tensor) -> None:
        value = value.detach().float().reshape(())
        sums[key] = value if key not in sums else sums[key] + value.to(sums[key].device)

    norm_sum = ent_sum = reg_rows = None
    for stats in statistics:
        valid = stats.valid
        rows = valid.sum()
        add("attn_rows", rows)
        add("attn_entropy_sum", stats.entropy.masked_select(valid).sum())
        add("attn_row_sum_sum", stats.row_sum.masked_select(valid).sum())
        add("attn_zero_count", stats.zeros.masked_select(valid).sum())
        add("attn_key_count", stats.n.masked_select(valid).sum())
        if not stats.regularizable:
            continue
        zero = torch.zeros((), dtype=stats.row_sum.dtype, device=stats.row_sum.device)
        ent = entropy_margin_rows(stats.entropy, stats.n, margin, side)
        norm_part = torch.where(valid, norm_rows(stats.row_sum), zero).sum()
        ent_part = torch.where(valid, ent, zero).sum()
        norm_sum = norm_part if norm_sum is None else norm_sum + norm_part
        ent_sum = ent_part if ent_sum is None else ent_sum + ent_part
        reg_rows = rows if reg_rows is None else reg_rows + rows
        add("attn_reg_rows", rows)
    names = list(sums)
    values = torch.stack([sums[key] for key in names]).tolist() if names else []
    terms: Dict[str, Any] = {key: 0.0 for key in LOG_KEYS}
    terms.update(zip(names, values))
    denominator = reg_rows.clamp(min=1).to(norm_sum.dtype) if reg_rows is not None else None
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
    statistics = collect_attention_statistics(
        model, _choice(cfg, "attention_norm_row_sum", NORM_ROW_SUMS))
    if not statistics:
        return loss
    terms = attention_regularizer_terms(
        statistics, cfg.attention_entropy_margin,
        _choice(cfg, "attention_entropy_margin_side", MARGIN_SIDES))
    for key in LOG_KEYS:
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
    """fairseq's label-smoothed cross-entropy plus ReLUFormer's attention regularisers.

    Built like the plugin's other criteria: ``Criterion(task, cfg)`` with its config dataclass.
    """

    def __init__(self, task, cfg: RegularizedLabelSmoothedCrossEntropyConfig):
        eps = cfg.label_smoothing
        if eps is None or not 0.0 <= eps < 1.0:
            raise OptionError("--label-smoothing",
                              f"--label-smoothing must be in [0, 1), got {eps}")
        check_attention_regularizer_config(cfg)
        super().__init__(task, cfg.sentence_avg, eps, cfg.ignore_prefix_size,
                         cfg.report_accuracy)
        self.cfg = cfg

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        loss = add_attention_regularizers(model, loss, sample_size, logging_output, self.cfg)
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        reduce_attention_metrics(logging_outputs)
