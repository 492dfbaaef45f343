"""``sparse_softmax_sentence_prediction``: loss, accuracy and micro-F1 in process, and a
many-class run of fairseq's ``sentence_prediction`` task end to end."""

import random
import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from fairseq.logging import metrics
from sklearn.metrics import f1_score

from relu_former.criterions.sparse_softmax_sentence_prediction import (
    SparseSoftmaxSentencePredictionConfig,
    SparseSoftmaxSentencePredictionCriterion,
)
from relu_former.sparse_softmax.sparse_softmax import sparse_softmax_cross_entropy

from helpers import FairseqRun, fairseq_command, run_command

NUM_CLASSES = 30
HEAD = "sentence_classification_head"


def make_task(num_classes=NUM_CLASSES):
    labels = Dictionary()
    for i in range(num_classes):
        labels.add_symbol(f"L{i}")
    return SimpleNamespace(cfg=SimpleNamespace(num_classes=num_classes),
                           label_dictionary=labels, target_dictionary=labels)


class HeadModel(torch.nn.Module):
    """A 'classifier' returning fixed class logits through a named classification head."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(logits)
        self.classification_heads = torch.nn.ModuleDict({HEAD: torch.nn.Identity()})

    def forward(self, features_only, classification_head_name, **net_input):
        assert features_only and classification_head_name == HEAD
        return self.logits, None

    def get_targets(self, sample, net_output):
        return sample["target"]


def make_criterion(task=None, **overrides):
    cfg = SparseSoftmaxSentencePredictionConfig(**overrides)
    return SparseSoftmaxSentencePredictionCriterion(task or make_task(), cfg)


def batch(n=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    logits = torch.randn(n, NUM_CLASSES, generator=gen, dtype=torch.float64)
    logits[torch.arange(n)[: n // 2], target[: n // 2]] += 3.0  # half of them right
    return logits, {"net_input": {}, "target": target, "ntokens": 5 * n}


@pytest.mark.parametrize("negative", ["", "L3"])
def test_loss_accuracy_and_micro_f1(negative):
    logits, sample = batch()
    task = make_task()
    criterion = make_criterion(task, sparse_softmax_k=5, label_smoothing=0.1,
                               micro_f1_negative_label=negative)
    loss, sample_size, log = criterion(HeadModel(logits), sample)
    target = sample["target"]
    torch.testing.assert_close(
        loss, sparse_softmax_cross_entropy(logits, target, 5, 0.1).loss.sum(), rtol=0, atol=0
    )
    torch.testing.assert_close(log["nll_loss"], F.cross_entropy(logits, target, reduction="sum"),
                               rtol=0, atol=1e-12)
    assert sample_size == 64
    with metrics.aggregate(new_root=True) as agg:
        criterion.reduce_metrics([log])
    values = agg.get_smoothed_values()
    preds = logits.argmax(-1)
    accuracy = 100.0 * float((preds == target).float().mean())
    assert values["accuracy"] == pytest.approx(accuracy, abs=0.05)
    positives = [c for c in range(NUM_CLASSES) if f"L{c}" != negative]
    want = 100 * f1_score(target.numpy(), preds.numpy(), labels=positives, average="micro")
    assert values["micro_f1"] == pytest.approx(want, abs=0.01)
    if not negative:
        assert values["micro_f1"] == pytest.approx(accuracy, abs=0.01)
    assert 0 < values["outside_topk"] < 100


def test_k_at_least_classes_is_cross_entropy():
    logits, sample = batch(seed=1)
    loss, _, _ = make_criterion(sparse_softmax_k=NUM_CLASSES)(HeadModel(logits), sample)
    want = F.cross_entropy(logits, sample["target"], reduction="sum")
    torch.testing.assert_close(loss, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("overrides,message", [
    ({"sparse_softmax_k": 0}, r"--sparse-softmax-k must be an integer >= 1"),
    ({"sparse_softmax_k": 31}, r"--sparse-softmax-k 31 is larger than the --num-classes \(30\)"),
    ({"regression_target": True}, r"does not support --regression-target"),
    ({"report_mcc": True}, r"--report-mcc: not supported"),
    ({"micro_f1_negative_label": "oos"}, r"--micro-f1-negative-label 'oos' is not a label"),
])
def test_bad_settings_name_the_flag(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_criterion(**overrides)


def write_classification_data(raw, classes=120, per_class=4, seed=0):
    """Sentences whose label is spelled by a keyword among noise words, over 100 classes."""
    rng = random.Random(seed)
    raw.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", per_class), ("valid", 1)):
        lines, labels = [], []
        for _ in range(count):
            for c in range(classes):
                words = [f"n{rng.randrange(40)}" for _ in range(rng.randint(2, 6))]
                words.insert(rng.randrange(len(words) + 1), f"k{c}")
                lines.append(" ".join(words))
                labels.append(f"L{c}")
        (raw / f"{split}.input0").write_text("\n".join(lines) + "\n")
        (raw / f"{split}.label").write_text("\n".join(labels) + "\n")


@pytest.mark.slow
def test_sentence_prediction_trains_with_over_100_classes_and_logs_micro_f1(tmp_path):
    raw, data = tmp_path / "raw", tmp_path / "bin"
    write_classification_data(raw)
    for part in ("input0", "label"):
        run_command([
            fairseq_command("fairseq-preprocess"), "--only-source", "--trainpref",
            raw / f"train.{part}", "--validpref", raw / f"valid.{part}", "--destdir",
            data / part, "--workers", "1",
        ])
    run = FairseqRun(data_bin=data, work=tmp_path)
    proc = run.train(
        "--task", "sentence_prediction", "--num-classes", "120", "--max-positions", "16",
        "--init-token", "0", "--criterion", "sparse_softmax_sentence_prediction",
        "--sparse-softmax-k", "20", "--label-smoothing", "0.1", "--encoder-layers", "1",
        "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--batch-size", "32",
        "--best-checkpoint-metric", "micro_f1", "--maximize-best-checkpoint-metric",
        arch="roberta", tiny_model=False,
    )
    log = proc.stdout + proc.stderr
    valid = re.findall(r"\| valid \| epoch .*", log)[-1]
    for key in ("loss", "nll_loss", "sparse_nll_loss", "outside_topk", "accuracy", "micro_f1"):
        assert f"| {key} " in valid, (key, valid)
    micro_f1 = float(re.search(r"\| micro_f1 ([\d.]+)", valid).group(1))
    accuracy = float(re.search(r"\| accuracy ([\d.]+)", valid).group(1))
    assert micro_f1 == pytest.approx(accuracy, abs=0.1)  # single-label, no negative class
