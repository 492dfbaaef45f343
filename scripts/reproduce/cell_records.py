"""Finished cells kept in the repository, so that a table is completed across sessions and
machines: one small JSON per cell (its figures, validation curve, learning rate, why it
stopped, the commit it ran at, the device its fairseq commands ran on and its key),
``ROOT/<table>/<row>-seed<S>[-lr<rate>].json`` beside the report
(``docs/reproduction/cells/<scale>/`` by default). Checkpoints stay in the work folder and
are not kept. A run on a fresh clone takes a cell whose record has the same key from here
instead of training it again; a record of another key (changed settings) is ignored and
replaced when the cell finishes. A recorded cell whose checkpoints another cell needs is
trained again, and its new record replaces the old.
"""

from __future__ import annotations

from pathlib import Path

from scripts.reproduce.cell_cache import read_result, write_result


class CellRecords:
    """The records under ``root``, one file per table, row, seed, (if chosen) rate and (for
    a cell at its row's chosen rate with a larger cap than the grid's) epoch cap, or (for a
    cell at its table's budget, :mod:`~scripts.reproduce.budget`) update budget."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, table: str, row: str, seed: int, lr: float | None,
             max_epoch: int | None = None, budget: int | None = None) -> Path:
        rate = "" if lr is None else f"-lr{lr:g}"
        cap = "" if max_epoch is None else f"-max_epoch{max_epoch}"
        updates = "" if budget is None else f"-budget{budget}"
        return self.root / table / f"{row}-seed{seed}{rate}{cap}{updates}.json"

    get = staticmethod(read_result)  # the record at ``path`` if it is of the cell ``key``
    put = staticmethod(write_result)

