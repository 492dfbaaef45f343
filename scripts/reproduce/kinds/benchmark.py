"""The successive-halving operator's speed and quality: ``scripts/benchmarks/
bench_pooling_operator.py``'s grid at the table's ``(n, k)``, one cell per seed, in this
process, keeping per operator the forward time and the nCCS similarity to the true top-k.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

from scripts.common.atomic_files import write_text_atomic
from scripts.reproduce.kinds import Step
from scripts.reproduce.spec import Row, TableSpec


def prepare(spec: TableSpec, scale: str, settings: Dict[str, Any], work: Path,
            say: Callable[[str], None]) -> Dict[str, Any]:
    return {"description": f"random vectors, batch {settings['batch']}, d {settings['dim']}, "
                           f"n {settings['n']}, k {settings['k']}"}


def cell_settings(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
                  data: Dict[str, Any]) -> Dict[str, Any]:
    return {"settings": dict(settings), "operator": row.key, "seed": seed}


def steps(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
          data: Dict[str, Any], folder: Path, parent: Path | None) -> List[Step]:
    def measure() -> None:
        """measure time and nCCS with scripts.benchmarks.bench_pooling_operator"""
        import torch

        from scripts.benchmarks import bench_pooling_operator as bench

        args = bench.parse_args([
            "--lengths", str(settings["n"]), "--ks", str(settings["k"]),
            "--batch", str(settings["batch"]), "--dim", str(settings["dim"]),
            "--rounds", str(settings["rounds"]), "--seed", str(seed),
            "--goyal-max-work", str(settings["n"] * settings["k"])])
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        grid = bench.measure_grid(args)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "grid.json", json.dumps(grid, indent=1))

    return [Step("grid.json", call=measure, timed=True)]


def collect(spec: TableSpec, row: Row, folder: Path) -> Dict[str, float]:
    grid = json.loads((folder / "grid.json").read_text())[0]
    return {"ms": 1e3 * float(grid[f"time_{row.key}"]), "nccs": float(grid[f"nccs_{row.key}"])}
