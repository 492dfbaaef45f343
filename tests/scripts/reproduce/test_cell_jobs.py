"""The order in which a call starts its cells: seed by seed, so that the rows a claim pairs at
one seed finish together and a call cut short leaves whole pairs; a child after its parent."""

from __future__ import annotations

from types import SimpleNamespace

from scripts.reproduce import cell_jobs


def _table(tmp_path, jobs: int, started: list):
    options = SimpleNamespace(jobs=jobs, executor="local", work=tmp_path, max_new_cells=None,
                              deadline=None, say=lambda _: None, finished=[], device="cpu")
    table = SimpleNamespace(options=options, commit_id="x", started=0,
                            run_cell=lambda cell: started.append(cell.name),
                            spec=SimpleNamespace(name="t"))
    table.root = table
    return table


def _cells(table, tmp_path):
    """Rows a and b (paired), and c, which starts from a; 3 seeds; listed row by row."""
    cells, parents = [], {}
    for row in ("a", "b", "c"):
        for seed in (1, 2, 3):
            parent = parents.get(seed) if row == "c" else None
            cell = SimpleNamespace(name=f"{row}{seed}", seed=seed, parent=parent, owner=table,
                                   folder=tmp_path / f"{row}{seed}")
            if row == "a":
                parents[seed] = cell
            cells.append(cell)
    return cells


def test_cells_run_seed_by_seed_each_child_after_its_parent(tmp_path):
    started: list = []
    table = _table(tmp_path, 1, started)
    cell_jobs.run_cells(table, _cells(table, tmp_path), lambda: None)
    assert started == ["a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3"]


def test_two_jobs_start_the_rows_of_seed_1_first(tmp_path, monkeypatch):
    """``--rows a b --seeds 3 --jobs 2``: a and b of seed 1 start together, then seed 2's."""
    started: list = []

    class Jobs:  # submitit's jobs, each ending when the runner next looks
        def __init__(self, options, name) -> None:
            self.limit, self.running = options.jobs, {}

        def submit(self, cell) -> None:
            started.append((cell.name, sorted(c.name for c, _ in self.running.values())))
            self.running[id(cell)] = (cell, None)

        def finished(self):
            ended = [(cell, {"said": [], "cell": {}}) for cell, _ in self.running.values()]
            self.running.clear()
            return ended

    monkeypatch.setattr(cell_jobs, "Jobs", Jobs)
    table = _table(tmp_path, 2, started)
    cells = [cell for cell in _cells(table, tmp_path) if not cell.name.startswith("c")]
    cell_jobs.run_cells(table, cells, lambda: None)
    # each with what ran beside it
    assert started == [("a1", []), ("b1", ["a1"]), ("a2", []), ("b2", ["a2"]),
                       ("a3", []), ("b3", ["a3"])]
