"""Seeds from power: after a call's cells finish, the claims not resolved whose 80%-power
need is within :data:`~scripts.reproduce.claims.SEEDS_CAP` seeds a row get them.

``python -m scripts.reproduce TABLE --add-seeds`` runs the rows of every such claim (both
rows, so that they stay paired) up to the seeds the claim needs
(:func:`~scripts.reproduce.claims.seeds_wanted`), judges again, and goes on until no claim
within reach asks for more; a claim beyond the cap keeps saying it needs about N seeds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Tuple

from scripts.reproduce.claims import SEEDS_CAP, seeds_wanted
from scripts.reproduce.run_options import RunOptions
from scripts.reproduce.runner import run_table
from scripts.reproduce.spec import TableSpec


def add_seeds(spec: TableSpec, options: RunOptions, cells: List, data: Dict
              ) -> Tuple[List, Dict, int]:
    """Run the seeds the claims within reach need; the table's cells at the seeds reached
    (collected), its data, and that number of seeds."""
    seeds = options.seeds
    while wanted := seeds_wanted(spec, cells, data):
        more = max(wanted.values())
        if more <= seeds and all(len([c for c in cells if c.row.key == row
                                      and c.result is not None]) >= more for row in wanted):
            break  # planned and run already: a seed that failed to finish is not retried here
        options.say(f"{spec.name}: {', '.join(sorted(wanted))} to {more} seeds (claims not "
                    f"resolved whose 80%-power need is within the cap of {SEEDS_CAP})")
        run_table(spec, replace(options, rows=sorted(wanted), seeds=more))
        seeds = max(seeds, more)
        cells, data = run_table(spec, replace(options, seeds=seeds, collect_only=True))
    return cells, data, seeds
