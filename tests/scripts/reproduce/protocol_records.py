"""What every table at the training protocol records for one row at seed 1: a grid cell a
rate (trained, not evaluated), the rate of the lowest validation loss chosen, and the cell at
that rate stopped at a plateau with its curve (shared by the kinds' protocol tests)."""

from __future__ import annotations

from typing import Dict, Mapping, Tuple


def chosen_cell(found: Mapping[str, dict], row: str, settings: Mapping, loss: str,
                evaluated: str) -> Tuple[float, Dict[str, float], dict]:
    """Check the records ``found`` (file name -> record) of ``row``; ``loss`` is the figure
    the grid compares, ``evaluated`` one only an evaluated cell has. Returns the chosen rate,
    the grid's file names with their rates, and the chosen cell's record."""
    grid = {f"{row}-seed1-lr{lr:g}.json": lr for lr in settings["lr_grid"]}
    assert all(found[name]["search"] and found[name]["seed"] == 1 for name in grid)
    assert not any(evaluated in found[name]["figures"] for name in grid)
    values = {lr: found[name]["figures"][loss] for name, lr in grid.items()}
    chosen = min(values, key=values.get)
    longer = f"{row}-seed1-lr{chosen:g}-max_epoch{settings['plateau_max_epoch']}.json"
    assert sorted(found) == sorted([*grid, longer])
    record = found[longer]
    assert record["lr"] == chosen and not record["search"]
    assert record["stopped"] == "plateau" and not record["still_improving"]
    assert len(record["curve"]) >= 2
    assert record["figures"][loss] == min(value for _, value in record["curve"])
    return chosen, grid, record
