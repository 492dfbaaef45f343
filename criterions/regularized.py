"""ReLUFormer's attention regularisers as fairseq glue (the ReLUFormer paper, section 4.2).

The maths (L_norm, L_ent, the entropy from the kernel's sums) is torch-only and lives in
``relu_former.relu_attention.regularisers``; this file adds the fairseq side:

    L = L_task + lambda_norm * L_norm + lambda_ent * L_ent

fairseq sums the task loss over ``sample_size`` tokens, so the regularisers are multiplied by
``sample_size``: a weight lambda then means "lambda per target token", whatever the batch.

Statistics on request: in training, the criterion runs the model's forward pass inside
``model.requested_attention_statistics()`` (``relu_former.relu_attention.statistics``) and
reads ``model.attention_statistics()`` before leaving it; nothing is computed otherwise.
Other criteria opt in with ``AttentionRegularized`` (a mixin: ``self.regularized_forward``
around their own forward, ``reduce_attention_metrics`` from their ``reduce_metrics``) and the
fields of ``AttentionRegularizerConfig`` in their config.
"""

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Sequence, Tuple

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics

from relu_former.errors import OptionError
from relu_former.relu_attention.config import (
    DEFAULT_ENTROPY_LOSS_WEIGHT,
    DEFAULT_ENTROPY_MARGIN,
    DEFAULT_ENTROPY_MARGIN_SIDE,
    DEFAULT_NORM_LOSS_WEIGHT,
    DEFAULT_NORM_ROW_SUM,
    check_finite_weight,
)
from relu_former.relu_attention.regularisers import (
    LOG_KEYS,
    MARGIN_SIDES,
    regularizer_terms,
)

logger = logging.getLogger(__name__)

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
        default=DEFAULT_NORM_LOSS_WEIGHT,
        metadata={"help": "weight lambda_norm of L_norm = mean |log S_i| (per target token); "
                  "0 disables it"},
    )
    attention_entropy_loss_weight: float = field(
        default=DEFAULT_ENTROPY_LOSS_WEIGHT,
        metadata={"help": "weight lambda_ent of the entropy-margin loss L_ent (per target "
                  "token); 0 disables it"},
    )
    attention_entropy_margin: float = field(
        default=DEFAULT_ENTROPY_MARGIN,
        metadata={"help": "C in L_ent: the margin C log n_i, as a share of the uniform entropy "
                  "log n_i (the paper's 0.7)"},
    )
    attention_entropy_margin_side: ChoiceEnum(MARGIN_SIDES) = field(
        default=DEFAULT_ENTROPY_MARGIN_SIDE,
        metadata={"help": "which side of C log n_i L_ent penalises: below = "
                  "max(C log n_i - H_i, 0), flattens sparse rows (default); above = "
                  "max(H_i - C log n_i, 0), an upper bound that sharpens flat rows"},
    )
    attention_norm_row_sum: ChoiceEnum(NORM_ROW_SUMS) = field(
        default=DEFAULT_NORM_ROW_SUM,
        metadata={"help": "the row sum S_i of L_norm: scores = sum of the ReLU scores, before "
                  "the variance factor (default); weights = sum of the weights applied to "
                  "the values, after it"},
    )


@dataclass
class OptionalAttentionRegularizerConfig(AttentionRegularizerConfig):
    """The regulariser fields plus the switch of criteria that add them only when asked."""

    attention_regularizers: bool = field(
        default=False,
        metadata={"help": "add ReLUFormer's attention regularisers to this loss (weights "
                  "--attention-norm-loss-weight, --attention-entropy-loss-weight); off by "
                  "default, and then no attention statistic is computed"},
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
        check_finite_weight(getattr(cfg, name), "--" + name.replace("_", "-"))
    _choice(cfg, "attention_entropy_margin_side", MARGIN_SIDES)
    _choice(cfg, "attention_norm_row_sum", NORM_ROW_SUMS)


def add_attention_regularizers(model: torch.nn.Module, loss: torch.Tensor, sample_size: float,
                               logging_output: Dict[str, Any], cfg: Any) -> torch.Tensor:
    """Add lambda-weighted L_norm and L_ent to ``loss`` and log the attention statistics.

    ``cfg`` has the fields of ``AttentionRegularizerConfig``. The losses are means over rows
    times ``sample_size`` (fairseq's gradient denominator), so lambda is per target token.
    Writes sums into ``logging_output`` for ``reduce_attention_metrics``; when the model
    recorded nothing (no request, evaluation mode), ``loss`` is returned unchanged.
    """
    statistics = model.attention_statistics(
        _choice(cfg, "attention_norm_row_sum", NORM_ROW_SUMS))
    if not statistics:
        return loss
    terms = regularizer_terms(
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


class AttentionRegularized:
    """Criterion mixin: ReLUFormer's regularisers around the criterion's own forward.

    ``self.cfg`` has the fields of ``AttentionRegularizerConfig``. Statistics are requested
    only in training mode (the regularisers are training losses).
    """

    def regularized_forward(self, model: torch.nn.Module,
                            forward: Callable[[], Tuple[torch.Tensor, Any, Dict[str, Any]]]):
        """``forward()`` -> (loss, sample_size, logging_output), with the regularisers added."""
        if not model.training:
            return forward()
        if not hasattr(model, "requested_attention_statistics"):
            raise OptionError("--arch", "the attention regularisers need a model that records "
                              "attention statistics (--arch relu_former* or pyramidion*), "
                              f"not {type(model).__name__}; choose such a model or a "
                              "criterion without them")
        with model.requested_attention_statistics():
            loss, sample_size, logging_output = forward()
            loss = add_attention_regularizers(model, loss, sample_size, logging_output,
                                              self.cfg)
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output


@dataclass
class RegularizedLabelSmoothedCrossEntropyConfig(
    LabelSmoothedCrossEntropyCriterionConfig, AttentionRegularizerConfig
):
    pass


@register_criterion(
    "regularized_label_smoothed_cross_entropy",
    dataclass=RegularizedLabelSmoothedCrossEntropyConfig,
)
class RegularizedLabelSmoothedCrossEntropyCriterion(AttentionRegularized,
                                                    LabelSmoothedCrossEntropyCriterion):
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
        return self.regularized_forward(
            model, lambda: super(RegularizedLabelSmoothedCrossEntropyCriterion, self).forward(
                model, sample, reduce=reduce))

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        reduce_attention_metrics(logging_outputs)
