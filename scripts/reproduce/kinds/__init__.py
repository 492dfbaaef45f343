"""How a row of a table at one seed becomes commands, and how its figures are read back.

Every kind module defines ``prepare`` (the table's shared data), ``cell_settings`` (what is
hashed into a cell's key), ``steps`` (a cell's commands) and ``collect`` (its figures, from its
logs). It may define ``dictionary`` (checked against another table's a row starts from),
``VALIDATION_LOSS``, and, where a ``same_as`` row is of its kind, ``decoded_checkpoint``,
``measurements`` and ``measured`` (what that row runs).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Callable, Dict, List, Sequence

from scripts.reproduce.log_figures import NLL
from scripts.reproduce.spec import TableSpec


@dataclass
class Step:
    """One command of a cell: a subprocess (``argv``) or an in-process call (``call``), its
    output in ``log``; ``dry_run`` prints the exact fairseq command; a ``timed`` step's time
    is a figure."""

    log: str
    argv: List[str] | None = None
    call: Callable[[], None] | None = None
    env: Dict[str, str] = field(default_factory=dict)
    dry_run: List[str] | None = None
    trains: bool = False  # a training step: stopped by NaN/inf it is a divergence, not an error
    timed: bool = False

    def describe(self) -> str:
        import shlex

        if self.argv is None:
            return f"(in-process) {getattr(self.call, '__doc__', '') or self.log}"
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def on_device(steps: Sequence[Step], device: str) -> List[Step]:
    """``steps`` on ``device``: on ``"cuda"`` without ``--cpu``."""
    if device == "cpu":
        return list(steps)
    return [replace(step, argv=[part for part in step.argv if part != "--cpu"])
            if step.argv else step for step in steps]


def kind_module(name: str) -> ModuleType:
    """The module of kind ``name``: ``scripts/reproduce/kinds/NAME.py``."""
    return importlib.import_module(f"scripts.reproduce.kinds.{name}")


def stopping_loss(spec: TableSpec) -> str:
    """The validation loss ``spec``'s cells stop on: the table's, its kind's, or the nll."""
    return spec.validation_loss or getattr(kind_module(spec.kind), "VALIDATION_LOSS", NLL)


def recipe_steps(recipe: str, model: str, env: Dict[str, str], save_dir: str,
                 train_flags: Sequence[str],
                 evaluations: Sequence[tuple[str, Sequence[str]]] = (("score-test.json", ()),),
                 ) -> List[Step]:
    """The recipe's ``train.sh``, then ``evaluate.sh`` per results file."""
    folder = f"scripts/recipes/{recipe}"
    env = {**env, "SAVE_DIR": save_dir}
    train = [f"{folder}/train.sh", model, "--", *train_flags]
    found = [Step("recipe-train.log", argv=train, env=env,
                  dry_run=[train[0], "--dry-run", *train[1:]], trains=True)]
    for results, flags in evaluations:
        evaluate = [f"{folder}/evaluate.sh", model, *(["--", *flags] if flags else [])]
        step_env = {**env, "RESULTS": f"{save_dir}/{results}"}
        found.append(Step(f"recipe-evaluate-{results}.log", argv=evaluate, env=step_env,
                          dry_run=[evaluate[0], "--dry-run", *evaluate[1:]]))
    return found
