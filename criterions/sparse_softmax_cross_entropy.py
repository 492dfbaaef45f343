"""``sparse_softmax_cross_entropy``: sparse-softmax training loss for sequence models.

A drop-in replacement for fairseq's ``label_smoothed_cross_entropy``: the same
``--label-smoothing``, ``--sentence-avg``, ``--report-accuracy`` and ``--ignore-prefix-size``,
plus ``--sparse-softmax-k`` and ``--sparse-label-smoothing``. The loss is
log sum_{j in Omega_k} exp(z_j) - z_t over the k largest logits, with the target not forced
into the top k (see :mod:`relu_former.sparse_softmax.sparse_softmax` for the formula, the two label
smoothing rules and the tie rule). With ``--sparse-softmax-k`` equal to the vocabulary size it
is exactly fairseq's criterion. ``--sparse-k`` is the flag's deprecated spelling, and with
``--task translation_sparse_decoding`` the one flag is also decoding's k
(:mod:`relu_former.sparse_softmax.k_flag`).

Besides ``loss`` it logs

- ``nll_loss`` / ``ppl``: the *ordinary full-softmax* nll of the same logits (computed without
  gradient, in row chunks), so runs compare with softmax baselines on the usual figures;
- ``sparse_nll_loss``: the sparse-softmax loss without label smoothing;
- ``outside_topk``: the share (percent) of targets that fell outside the top k.

With ``--attention-regularizers`` it also adds ReLUFormer's attention regularisers
(``--attention-norm-loss-weight`` ...), the mechanism of
``regularized_label_smoothed_cross_entropy``; without it no attention statistic is computed.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from relu_former.criterions.regularized import (
    AttentionRegularized,
    OptionalAttentionRegularizerConfig,
    check_attention_regularizer_config,
    reduce_attention_metrics,
)
from relu_former.errors import OptionError
from relu_former.sparse_softmax.k_flag import (
    DEFAULT_TRAINING_K,
    add_training_k_flags,
    check_k_in_range,
)
from relu_former.sparse_softmax.sparse_softmax import (
    SMOOTHING_RULES,
    softmax_nll,
    sparse_softmax_cross_entropy,
)

K_HELP = ("k of sparse-softmax, an integer from 1 to the number of classes (target vocabulary "
          "or --num-classes): the loss normalises over the k largest logits only; k = the "
          "number of classes is ordinary softmax cross-entropy (the paper's best for ~100 "
          "classes is 20)")


@dataclass
class SparseSoftmaxConfig(FairseqDataclass):
    """The flags every sparse-softmax criterion shares."""

    sparse_softmax_k: int = field(default=DEFAULT_TRAINING_K, metadata={"help": K_HELP})
    label_smoothing: float = field(
        default=0.0,
        metadata={"help": "epsilon for label smoothing, in [0, 1) (0 means none); how it is "
                  "shared is --sparse-label-smoothing"},
    )
    sparse_label_smoothing: ChoiceEnum(SMOOTHING_RULES) = field(  # type: ignore[valid-type]
        default="top_k",
        metadata={"help": "how --label-smoothing is shared among the other classes of the top "
                  "k: top_k = all of epsilon, uniformly over them; vocabulary = epsilon/(V-1) "
                  "each, fairseq's whole-vocabulary target with the classes outside the top k "
                  "left out (their sparse probability is 0). Equal when k = V"},
    )


def check_training_k(k: object, num_classes: Optional[int], what: str) -> None:
    """Raise an OptionError naming --sparse-softmax-k unless 1 <= k <= ``num_classes``
    (the width of the model's output, named ``what``; None when not known yet)."""
    check_k_in_range(
        k, 1, num_classes, what,
        meaning="the number of largest logits sparse-softmax keeps; the paper uses 20 for "
                "~100 classes",
        at_limit=f"--sparse-softmax-k {num_classes} is ordinary softmax cross-entropy")


class SparseSoftmaxFlags:
    """The criteria's ``add_args``: the dataclass's flags, ``--sparse-softmax-k`` shared with
    a sparse decoding task, and the deprecated ``--sparse-k``."""

    @classmethod
    def add_args(cls, parser) -> None:
        add_training_k_flags(parser, lambda: super(SparseSoftmaxFlags, cls).add_args(parser))


def check_sparse_softmax_config(cfg: Any, num_classes: Optional[int], what: str) -> None:
    """Raise an OptionError naming the flag when ``--sparse-softmax-k`` or
    ``--label-smoothing`` is bad.

    ``num_classes`` is the width of the model's output (the target vocabulary, or
    ``--num-classes``); None when it is not known yet.
    """
    check_training_k(cfg.sparse_softmax_k, num_classes, what)
    eps = cfg.label_smoothing
    if eps is None or not 0.0 <= eps < 1.0:
        raise OptionError(
            "--label-smoothing",
            f"--label-smoothing must be in [0, 1) (0 = no smoothing), got {eps}")
    rule = str(getattr(cfg, "sparse_label_smoothing", "top_k"))
    if rule not in SMOOTHING_RULES:
        raise OptionError(
            "--sparse-label-smoothing",
            f"--sparse-label-smoothing must be one of {', '.join(SMOOTHING_RULES)}, got {rule!r}")
    if getattr(cfg, "attention_regularizers", False):
        check_attention_regularizer_config(cfg)


@dataclass
class SparseSoftmaxCrossEntropyConfig(SparseSoftmaxConfig, OptionalAttentionRegularizerConfig):
    report_accuracy: bool = field(
        default=False, metadata={"help": "report accuracy metric (argmax of the logits)"}
    )
    ignore_prefix_size: int = field(
        default=0, metadata={"help": "Ignore first N tokens of every target"}
    )
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("sparse_softmax_cross_entropy", dataclass=SparseSoftmaxCrossEntropyConfig)
class SparseSoftmaxCrossEntropyCriterion(SparseSoftmaxFlags, AttentionRegularized,
                                         FairseqCriterion):
    """Sparse-softmax cross-entropy (top-k normalisation) with fairseq's usual logging."""

    def __init__(self, task, cfg: SparseSoftmaxCrossEntropyConfig):
        super().__init__(task)
        tgt_dict = getattr(task, "target_dictionary", None)
        check_sparse_softmax_config(
            cfg, len(tgt_dict) if tgt_dict is not None else None, "target vocabulary"
        )
        self.cfg = cfg
        self.k = cfg.sparse_softmax_k
        self.eps = cfg.label_smoothing
        self.smoothing = str(cfg.sparse_label_smoothing)
        self.sentence_avg = cfg.sentence_avg
        self.ignore_prefix_size = cfg.ignore_prefix_size
        self.report_accuracy = cfg.report_accuracy

    def logits_and_target(self, model, net_output, sample):
        """The decoder's raw logits (not log-probabilities) and the targets, prefix removed."""
        decoder = getattr(model, "decoder", None)
        if getattr(decoder, "adaptive_softmax", None) is not None:
            raise OptionError(
                "--criterion",
                "--criterion sparse_softmax_cross_entropy needs the decoder's full logits; it "
                "does not work with --adaptive-softmax-cutoff"
            )
        logits = net_output[0]
        target = model.get_targets(sample, net_output)
        if self.ignore_prefix_size > 0:
            logits = logits[:, self.ignore_prefix_size:, :]
            target = target[:, self.ignore_prefix_size:]
        check_training_k(self.k, logits.size(-1), "model's output size")
        return logits, target

    def forward(self, model, sample, reduce=True):
        if reduce and self.cfg.attention_regularizers:
            return self.regularized_forward(model, lambda: self.task_forward(model, sample))
        return self.task_forward(model, sample, reduce)

    def task_forward(self, model, sample, reduce=True):
        """The sparse-softmax loss alone: (loss, sample_size, logging_output)."""
        net_output = model(**sample["net_input"])
        logits, target = self.logits_and_target(model, net_output, sample)
        result = sparse_softmax_cross_entropy(
            logits, target, self.k, self.eps, ignore_index=self.padding_idx,
            smoothing=self.smoothing,
        )
        loss = result.loss.sum() if reduce else result.loss.reshape(-1)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        with torch.no_grad():
            real = target.ne(self.padding_idx)
            logging_output = {
                "nll_loss": softmax_nll(logits, target, self.padding_idx).sum().data,
                "sparse_nll_loss": result.nll_loss.sum().data,
                "topk_targets": real.sum().data,
                "topk_outside": (real & ~result.target_in_top_k).sum().data,
                "ntokens": sample["ntokens"],
                "nsentences": sample["target"].size(0),
                "sample_size": sample_size,
            }
            if self.report_accuracy:
                correct = logits.argmax(dim=-1).eq(target) & real
                logging_output["n_correct"] = utils.item(correct.sum())
                logging_output["total"] = utils.item(real.sum())
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        reduce_sparse_softmax_metrics(logging_outputs, nll_denominator="ntokens")
        total = utils.item(sum(log.get("total", 0) for log in logging_outputs))
        if total > 0:
            metrics.log_scalar("total", total)
            metrics.log_scalar(
                "n_correct", utils.item(sum(log.get("n_correct", 0) for log in logging_outputs))
            )
            metrics.log_derived(
                "accuracy",
                lambda meters: round(meters["n_correct"].sum * 100.0 / meters["total"].sum, 3)
                if meters["total"].sum > 0 else float("nan"),
            )
        reduce_attention_metrics(logging_outputs)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def reduce_sparse_softmax_metrics(logging_outputs, nll_denominator: str) -> None:
    """Log loss, full-softmax nll/ppl, sparse nll and the outside-top-k share (fairseq units).

    Losses are in base 2 as in fairseq's criterions; ``nll_denominator`` names the logging key
    the nll is averaged over (``ntokens`` for sequences, ``nsentences`` for classification).
    """

    def total(key: str) -> float:
        return utils.item(sum(log.get(key, 0) for log in logging_outputs))

    sample_size = total("sample_size")
    count = total(nll_denominator)
    metrics.log_scalar("loss", total("loss") / sample_size / math.log(2), sample_size, round=3)
    metrics.log_scalar("nll_loss", total("nll_loss") / count / math.log(2), count, round=3)
    metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
    metrics.log_scalar(
        "sparse_nll_loss", total("sparse_nll_loss") / count / math.log(2), count, round=3
    )
    targets = total("topk_targets")
    if targets > 0:
        metrics.log_scalar(
            "outside_topk", 100.0 * total("topk_outside") / targets, targets, round=2
        )
