"""Many-class classification cells (sparse-softmax's Figure 2): ``scripts/analysis/
classification.py``'s corpus, model and criteria, one criterion (softmax, or sparse-softmax at
one k) a cell, trained to a plateau of the valid error rate, its best checkpoint scored.
``--scale paper`` prints the same commands for a ``DATA_BIN`` binarized the same way.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List

from scripts.common.atomic_files import write_text_atomic
from scripts.common.fairseq_cli import fairseq_command
from scripts.reproduce import patient_train
from scripts.reproduce.claims import NO_MODEL_CLAIM, NoModel
from scripts.reproduce.kinds import Step
from scripts.reproduce.kinds.translation import plateau_flags
from scripts.reproduce.log_figures import ERROR, train_figures
from scripts.reproduce.spec import Row, TableSpec

# The figure a cell stops on and the grid compares: the error rate, 100 - valid accuracy,
# which every row shares. Not the row's own loss: the cross-entropy's is lowest at 4 epochs
# (valid accuracy 29.0%) while the accuracy goes on rising to about 40% at 2,000 updates.
VALIDATION_LOSS = ERROR


def script_args(settings: Dict[str, Any], work: Path, seed: int = 1):
    from scripts.analysis import classification

    argv = ["--out", str(work), "--work", str(work), "--seed", str(seed),
            "--locale-dir", str(settings["locale_dir"]), "--max-epoch",
            str(settings["max_epoch"]), "--model-args", settings["model_args"],
            "--min-per-class", str(settings["min_per_class"]),
            "--max-per-class", str(settings["max_per_class"]),
            "--batch-size", str(settings["batch_size"]), "--lr", str(settings["lr"])]
    for flag in ("valid_per_mille", "test_per_mille"):
        if flag in settings:
            argv += [f"--{flag.replace('_', '-')}", str(settings[flag])]
    return classification.parse_args(argv)


def prepare(spec: TableSpec, scale: str, settings: Dict[str, Any], work: Path,
            say: Callable[[str], None]) -> Dict[str, Any]:
    if scale == "paper":
        return {"description": "a sentence_prediction data-bin (input0/, label/) in $DATA_BIN",
                "folder": os.environ.get("DATA_BIN", "$DATA_BIN"), "classes": "$CLASSES"}
    from scripts.analysis.classification import prepare_data

    folder = work / "data" / "classification"
    data, info = prepare_data(script_args(settings, folder))
    # outside the cells' keys: figures of the data, measured anew for every report
    references = no_model(spec, folder / "corpus")
    return {"folder": str(data), "classes": info["classes"],
            "description": info["description"],
            "no_model": dict.fromkeys((row.key for row in spec.rows), references),
            "references": reference_line(references)}


def no_model(spec: TableSpec, corpus: Path) -> List[NoModel]:
    """The test figures of a classifier that reads no message: the training split's most
    frequent class predicted for every test message, scored as the cells are."""
    from scripts.analysis.classification import f1_scores

    train, test = ((corpus / f"{split}.label").read_text().splitlines()
                   for split in ("train", "test"))
    majority = Counter(train).most_common(1)[0][0]
    scores = f1_scores([majority] * len(test), test)
    return [NoModel(metric, scores[metric.key], "the most frequent training class's")
            for metric in spec.metrics if metric.key in scores]


def reference_line(references: List[NoModel]) -> str:
    figures = ", ".join(f"{reference.metric.label.split(' (')[0]} {reference.value:.2f}"
                        for reference in references)
    return (f"Without a model, on the same test messages: the training split's most frequent "
            f"class for every message scores {figures}. A row at or below it has learnt "
            f"nothing from the messages: {NO_MODEL_CLAIM}")


def cell_settings(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
                  data: Dict[str, Any]) -> Dict[str, Any]:
    keep = {k: v for k, v in settings.items() if k != "locale_dir"}
    # the stopping figure is in the key: a cell that stopped on the criterion's loss (before
    # the error rate) is not taken for one that stops on the error rate
    return {"settings": keep, "data": data.get("description"), "row": row.flags,
            "k": row.point.get("k"), "seed": seed, "validation_loss": VALIDATION_LOSS}


def epoch_updates(data_bin: Path, batch_size: int) -> int:
    """The updates of one epoch: ceil(training sentences / ``batch_size``)."""
    from fairseq.data import data_utils

    sentences = data_utils.load_indexed_dataset(str(data_bin / "input0" / "train"))
    return math.ceil(len(sentences) / batch_size)


def criterion_run(row: Row):
    """The script's run of ``row``: cross-entropy, or sparse-softmax at the row's k."""
    from scripts.analysis import classification

    k = row.point.get("k")
    criterion = (["--criterion", "sentence_prediction"] if k is None else
                 ["--criterion", "sparse_softmax_sentence_prediction", "--sparse-softmax-k", str(k),
                  "--label-smoothing", "0"])
    return classification.Run(row.label, k, criterion)


def score_step(data_bin: Path, folder: Path) -> Step:
    """Score the cell's ``checkpoint_best.pt`` on the test split, in this process."""
    def score() -> None:
        """score checkpoint_best.pt on the test split with scripts.analysis.classification"""
        from scripts.analysis.classification import evaluate

        write_text_atomic(folder / "scores.json", json.dumps(
            evaluate(folder / "checkpoint_best.pt", data_bin), indent=1))

    return Step("scores.json", call=score)


def steps(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
          data: Dict[str, Any], folder: Path, parent: Path | None) -> List[Step]:
    from scripts.analysis import classification

    if scale == "paper":
        args = script_args({**settings, "locale_dir": "/nonexistent"}, folder, seed)
        command = classification.train_command(criterion_run(row), Path(data["folder"]),
                                               folder, "$CLASSES", args)  # type: ignore[arg-type]
        return [Step("train.log", argv=list(command))]
    data_bin = Path(data["folder"])
    # kept beside the best: the last (a resumption, a longer cap) and one interval one
    stopping = [*plateau_flags(settings, epoch_updates(data_bin, settings["batch_size"]),
                               VALIDATION_LOSS), "--no-epoch-checkpoints"]
    args = script_args(settings, folder, seed)
    fairseq_train = [fairseq_command("fairseq-train"), *classification.train_args(
        criterion_run(row), data_bin, folder, int(data["classes"]), args, stopping)]
    train = Step("train.log", argv=[str(part) for part in patient_train.command(fairseq_train)],
                 trains=True)
    if row.hidden:  # a grid cell chooses the rate: trained, not scored
        return [train]
    return [train, score_step(data_bin, folder)]


def collect(spec: TableSpec, row: Row, folder: Path) -> Dict[str, float]:
    """The training figures and, but for a grid cell, test accuracy, micro- and macro-F1."""
    figures = train_figures(folder / "train.log", VALIDATION_LOSS)
    if row.hidden:
        return figures
    scores = json.loads((folder / "scores.json").read_text())
    return {**figures, **{k: float(scores[k]) for k in ("accuracy", "micro_f1", "macro_f1")}}
