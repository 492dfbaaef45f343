"""How a row of a table at one seed becomes commands, and how its figures are read back.

Every kind module defines

    prepare(spec, scale, settings, work, say) -> dict
        shared data of the table (built once per data setting, reused by every cell);
    cell_settings(spec, row, seed, scale, settings, data) -> dict
        everything that determines the cell's result (hashed into its cache key);
    steps(spec, row, seed, scale, settings, data, folder, parent) -> list[Step]
        the commands of one cell (``parent``: the folder of the row it starts from);
    collect(spec, row, folder) -> dict
        the cell's figures, read from the logs its steps wrote in ``folder``;

and may define

    dictionary(data) -> Path | None
        the file of the vocabulary its data is binarized with: a row that starts from another
        table's row needs the same file (byte for byte) in both tables' data;
    decoded_checkpoint(settings, folder) -> Path
        the model a finished cell in ``folder`` decodes;
    measurements(spec, row, scale, settings, data, checkpoint, folder) -> list[Step]
        what the table measures on a trained model (``checkpoint``) besides decoding it, into
        ``folder``: ``steps`` ends with them, and a row that is another table's model
        (``same_as``) runs only them, on that table's checkpoint;
    measured(folder) -> dict
        the figures ``measurements`` wrote in ``folder``;

and may set ``VALIDATION_LOSS``, the fairseq validation loss its cells stop on and the rate
grid compares (``--best-checkpoint-metric``; ``nll_loss`` where it is not set): the cells'
curves hold it and their figures its best value (``valid_nll``; for ``loss``, ``valid_loss``).
A table may choose another one for its own cells (``TableSpec.validation_loss``):
:func:`stopping_loss` is the one place that reads either. A kind whose cells train no model
(an operator's benchmark) sets ``TRAINS = False``: a finished cell of it that lacks a figure
is measured again by running it again (a trained cell only where its model is here).

At ``--scale paper`` the steps are the recipes' ``train.sh``/``evaluate.sh`` calls, whose
``--dry-run`` prints the exact fairseq command; ``collect`` reads the same files either way.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Callable, Dict, List, Sequence

from scripts.reproduce.log_figures import NLL
from scripts.reproduce.spec import TableSpec

KINDS = ("translation", "classification", "summarization", "benchmark")


@dataclass
class Step:
    """One command of a cell: a subprocess (``argv``) or an in-process call (``call``).

    ``log`` is the file (under the cell folder) that receives its output; ``dry_run`` is the
    argv that prints the exact fairseq command without running it (a recipe with
    ``--dry-run``), where there is one; ``env`` adds environment variables; a ``trains`` step
    that fairseq stops on a NaN or infinite loss makes the cell *diverged* (a result: the
    papers report models that fail to converge), not a failure of the run; a ``timed`` step,
    whose time is a figure (a decoding), runs one at a time, alone where one cell runs at a
    time or on Slurm (:func:`~scripts.reproduce.cell_jobs.timed_lock`).
    """

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
    """``steps`` as they run on ``device``: on ``"cuda"`` every command without its ``--cpu``,
    so that fairseq trains and decodes on the GPU (float32, as on the CPU: no command asks
    for half precision); on ``"cpu"`` the steps as they are. In-process steps, and commands
    that take no ``--cpu`` (the recipes', the attention analysis), run where they always do.
    The device is in no cell's key: the same cell on either device."""
    if device == "cpu":
        return list(steps)
    return [replace(step, argv=[part for part in step.argv if part != "--cpu"])
            if step.argv else step for step in steps]


def kind_module(name: str) -> ModuleType:
    """The module of kind ``name`` (one of :data:`KINDS`)."""
    if name not in KINDS:
        raise ValueError(f"unknown kind {name!r}; one of {', '.join(KINDS)}")
    return importlib.import_module(f"scripts.reproduce.kinds.{name}")


def stopping_loss(spec: TableSpec) -> str:
    """The validation loss the cells of ``spec`` stop on and choose their rates by: the
    table's own ``validation_loss``, else its kind's ``VALIDATION_LOSS``, else the valid
    nll."""
    return spec.validation_loss or getattr(kind_module(spec.kind), "VALIDATION_LOSS", NLL)


def recipe_steps(recipe: str, model: str, env: Dict[str, str], save_dir: str,
                 train_flags: Sequence[str],
                 evaluations: Sequence[tuple[str, Sequence[str]]] = (("score-test.json", ()),),
                 ) -> List[Step]:
    """``train.sh MODEL -- FLAGS`` then, per ``(results file, generate flags)``,
    ``evaluate.sh MODEL -- FLAGS`` of ``scripts/recipes/RECIPE``, with ``SAVE_DIR`` (and
    ``RESULTS``) set, so that ``SAVE_DIR/train.log`` and the score files are where the kind's
    ``collect`` reads them at any scale."""
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
