"""Seeds from power (``--add-seeds``): the rows of the claims not resolved whose 80%-power
need is within :data:`~scripts.reproduce.claims.SEEDS_CAP` get those seeds, until no claim
within reach asks for more.
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
    """Run the seeds the claims within reach need; the cells, data and seeds reached."""
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
