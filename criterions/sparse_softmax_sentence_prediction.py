"""``sparse_softmax_sentence_prediction``: sparse-softmax for many-class text classification.

The paper's classification setting (WoS-46985, OOS-eval, RCV1-v2, IFLYTEK: tens to hundreds of
classes, k = 20 best): fairseq's ``sentence_prediction`` task and a model with a
classification head (``--arch roberta`` ...), with the softmax of fairseq's
``sentence_prediction`` criterion replaced by sparse-softmax over the k largest class logits
(:mod:`relu_former.sparse_softmax.sparse_softmax`; target not forced into the top k, ties by lower
class index).

Logged per sentence: ``loss`` (the trained, possibly label-smoothed, sparse loss),
``nll_loss``/``ppl`` (ordinary full-softmax nll, for comparison with softmax runs),
``sparse_nll_loss``, ``outside_topk`` (percent of gold labels outside the top k),
``accuracy`` and ``micro_f1`` (percent). micro-F1 is 2 TP / (2 TP + FP + FN) summed over the
classes: with one gold label and one prediction per sentence every error is one FP and one FN,
so it equals accuracy unless ``--micro-f1-negative-label`` names a "no class" label (OOS-eval's
out-of-scope class, say), whose predictions and gold labels are then not counted as positives.
"""

from dataclasses import dataclass, field

import torch
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.sentence_prediction import SentencePredictionConfig
from fairseq.logging import metrics

from relu_former.criterions.regularized import (
    AttentionRegularized,
    OptionalAttentionRegularizerConfig,
    reduce_attention_metrics,
)
from relu_former.criterions.sparse_softmax_cross_entropy import (
    SparseSoftmaxConfig,
    SparseSoftmaxFlags,
    check_sparse_softmax_config,
    check_training_k,
    reduce_sparse_softmax_metrics,
)
from relu_former.errors import OptionError
from relu_former.sparse_softmax.sparse_softmax import softmax_nll, sparse_softmax_cross_entropy


@dataclass
class SparseSoftmaxSentencePredictionConfig(SentencePredictionConfig, SparseSoftmaxConfig,
                                            OptionalAttentionRegularizerConfig):
    micro_f1_negative_label: str = field(
        default="",
        metadata={"help": "a label (as written in the label data, e.g. oos) that means "
                  "'no class': micro-F1 does not count it as a positive; empty: none"},
    )


@register_criterion(
    "sparse_softmax_sentence_prediction", dataclass=SparseSoftmaxSentencePredictionConfig
)
class SparseSoftmaxSentencePredictionCriterion(SparseSoftmaxFlags, AttentionRegularized,
                                                FairseqCriterion):
    """Sentence classification trained with sparse-softmax; logs accuracy and micro-F1."""

    def __init__(self, task, cfg: SparseSoftmaxSentencePredictionConfig):
        super().__init__(task)
        if cfg.regression_target:
            raise OptionError(
                "--regression-target",
                "--criterion sparse_softmax_sentence_prediction classifies; it does not "
                "support --regression-target (use --criterion sentence_prediction)"
            )
        unsupported = [flag for flag, on in (
            ("--report-mcc", cfg.report_mcc), ("--report-acc-and-f1", cfg.report_acc_and_f1),
            ("--report-pearson-and-spearman", cfg.report_pearson_and_spearman)) if on]
        if unsupported:
            raise OptionError(
                unsupported[0],
                f"{', '.join(unsupported)}: not supported by sparse_softmax_sentence_prediction, "
                "which logs accuracy and micro_f1 itself; drop the flag"
            )
        num_classes = getattr(getattr(task, "cfg", None), "num_classes", -1)
        check_sparse_softmax_config(
            cfg, num_classes if num_classes and num_classes > 0 else None, "--num-classes"
        )
        self.cfg = cfg
        self.k = cfg.sparse_softmax_k
        self.eps = cfg.label_smoothing
        self.smoothing = str(cfg.sparse_label_smoothing)
        self.head_name = cfg.classification_head_name
        self.negative_class = -1
        if cfg.micro_f1_negative_label:
            labels = task.label_dictionary
            index = labels.index(cfg.micro_f1_negative_label)
            if index == labels.unk():
                raise OptionError(
                    "--micro-f1-negative-label",
                    f"--micro-f1-negative-label {cfg.micro_f1_negative_label!r} is not a label "
                    "of the label dictionary (label/dict.txt)"
                )
            self.negative_class = index - labels.nspecial

    def forward(self, model, sample, reduce=True):
        if self.cfg.attention_regularizers:
            return self.regularized_forward(model, lambda: self.task_forward(model, sample))
        return self.task_forward(model, sample, reduce)

    def task_forward(self, model, sample, reduce=True):
        """The sparse-softmax classification loss alone: (loss, sample_size, logging_output)."""
        heads = getattr(model, "classification_heads", {})
        if self.head_name not in heads:
            raise OptionError(
                "--arch",
                f"the model has no classification head {self.head_name!r}: "
                "sparse_softmax_sentence_prediction needs a model with classification heads "
                "(e.g. --arch roberta) and fairseq's --task sentence_prediction"
            )
        logits, _ = model(
            **sample["net_input"], features_only=True, classification_head_name=self.head_name
        )
        check_training_k(self.k, logits.size(-1), "number of classes")
        targets = model.get_targets(sample, [logits]).view(-1)
        sample_size = targets.numel()
        result = sparse_softmax_cross_entropy(logits, targets, self.k, self.eps,
                                              smoothing=self.smoothing)
        loss = result.loss.sum()
        with torch.no_grad():
            preds = logits.argmax(dim=-1)
            correct = preds.eq(targets)
            gold_positive = targets.ne(self.negative_class)
            pred_positive = preds.ne(self.negative_class)
            logging_output = {
                "nll_loss": softmax_nll(logits, targets).sum().data,
                "sparse_nll_loss": result.nll_loss.sum().data,
                "topk_targets": sample_size,
                "topk_outside": (~result.target_in_top_k).sum().data,
                "ncorrect": correct.sum().data,
                "f1_tp": (correct & gold_positive).sum().data,
                "f1_fp": (~correct & pred_positive).sum().data,
                "f1_fn": (~correct & gold_positive).sum().data,
                "ntokens": sample["ntokens"],
                "nsentences": sample_size,
                "sample_size": sample_size,
            }
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        reduce_sparse_softmax_metrics(logging_outputs, nll_denominator="nsentences")

        def total(key: str) -> float:
            return utils.item(sum(log.get(key, 0) for log in logging_outputs))

        sentences = total("nsentences")
        if sentences > 0:
            metrics.log_scalar("accuracy", 100.0 * total("ncorrect") / sentences, sentences,
                               round=1)
        for key in ("f1_tp", "f1_fp", "f1_fn"):
            metrics.log_scalar(key, total(key), round=0)
        metrics.log_derived("micro_f1", _micro_f1)
        reduce_attention_metrics(logging_outputs)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def _micro_f1(meters) -> float:
    tp, fp, fn = (meters[key].sum for key in ("f1_tp", "f1_fp", "f1_fn"))
    denominator = 2 * tp + fp + fn
    return round(100.0 * 2 * tp / denominator, 2) if denominator > 0 else float("nan")
