"""Many-class classification cells (sparse-softmax's Figure 2): ``scripts/analysis/
classification.py`` wrapped, one criterion (softmax cross-entropy, or sparse-softmax at one
k) at one seed per cell, in this process.

The corpus (which program a gettext message comes from) is built and binarized once, in the
table's data folder, by the script's own ``prepare_data``; each cell trains with the
script's ``train`` into its own folder and scores the test split with its ``evaluate``.
There is no paper-scale recipe for the paper's data sets (IFLYTEK, OOS-eval, WoS, RCV1):
``--scale paper`` prints the same training commands for a data-bin binarized the same way
(``DATA_BIN``), at the paper's k values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List

from scripts.common.atomic_files import write_text_atomic
from scripts.reproduce.kinds import Step
from scripts.reproduce.spec import Row, TableSpec


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
    return {"folder": str(data), "classes": info["classes"],
            "description": info["description"]}


def cell_settings(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
                  data: Dict[str, Any]) -> Dict[str, Any]:
    keep = {k: v for k, v in settings.items() if k != "locale_dir"}
    return {"settings": keep, "data": data.get("description"), "row": row.flags,
            "k": row.point.get("k"), "seed": seed}


def _run(row: Row, seed: int, settings: Dict[str, Any], data: Dict[str, Any],
         folder: Path) -> Step:
    from scripts.analysis import classification

    k = row.point.get("k")
    criterion = (["--criterion", "sentence_prediction"] if k is None else
                 ["--criterion", "sparse_softmax_sentence_prediction", "--sparse-softmax-k", str(k),
                  "--label-smoothing", "0"])
    run = classification.Run(row.label, k, criterion)

    def train_and_score() -> None:
        """train and score with scripts.analysis.classification (train, evaluate)"""
        args = script_args(settings, folder, seed)
        classification.train(run, Path(data["folder"]), int(data["classes"]), args)
        run.test = classification.evaluate(run.save_dir(folder) / "checkpoint_best.pt",
                                           Path(data["folder"]))
        write_text_atomic(folder / "scores.json", json.dumps(
            {**run.test, "valid_accuracy": run.valid_accuracy, "seconds": run.seconds,
             "command": run.command}, indent=1))

    return Step("scores.json", call=train_and_score)


def steps(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
          data: Dict[str, Any], folder: Path, parent: Path | None) -> List[Step]:
    if scale == "paper":
        from scripts.analysis import classification

        k = row.point.get("k")
        criterion = (["--criterion", "sentence_prediction"] if k is None else
                     ["--criterion", "sparse_softmax_sentence_prediction", "--sparse-softmax-k",
                      str(k)])
        args = script_args({**settings, "locale_dir": "/nonexistent"}, folder, seed)
        command = classification.train_command(
            classification.Run(row.label, k, criterion), Path(data["folder"]), folder,
            "$CLASSES", args)  # type: ignore[arg-type]
        return [Step("train.log", argv=list(command))]
    return [_run(row, seed, settings, data, folder)]


def collect(spec: TableSpec, row: Row, folder: Path) -> Dict[str, float]:
    scores = json.loads((folder / "scores.json").read_text())
    return {k: float(scores[k]) for k in ("accuracy", "micro_f1", "macro_f1")}

