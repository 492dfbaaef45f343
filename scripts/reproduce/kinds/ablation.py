"""ReLUFormer ablation cells: ``scripts/analysis/ablations.py`` wrapped, one variant at one
seed per cell (``--variants V --seed S``), its ``ablations.json`` read back.

The ablation script builds its own corpus and trains, decodes and measures attention of the
variant; this kind adds the seeds, the cache and the table. Paper scale: the IWSLT14 recipe
with the variant's flags after ``--``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

from scripts.reproduce.kinds import Step, recipe_steps
from scripts.reproduce.log_figures import score_figures, train_figures
from scripts.reproduce.spec import Row, TableSpec


def prepare(spec: TableSpec, scale: str, settings: Dict[str, Any], work: Path,
            say: Callable[[str], None]) -> Dict[str, Any]:
    if scale == "paper":
        return {"description": "the iwslt14_de_en recipe's prepared data"}
    return {"description": f"gettext catalogs {settings['locale_dir']}/{settings['lang']} -> en "
                           "(built by scripts.analysis.ablations in each cell)"}


def cell_settings(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
                  data: Dict[str, Any]) -> Dict[str, Any]:
    return {"settings": dict(settings), "variant": row.key, "flags": row.flags, "seed": seed}


def steps(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
          data: Dict[str, Any], folder: Path, parent: Path | None) -> List[Step]:
    if scale == "paper":
        return recipe_steps("iwslt14_de_en", row.recipe_model, dict(row.recipe_env),
                            str(folder), [*row.recipe_flags, "--seed", str(seed)])
    argv = [sys.executable, "-m", "scripts.analysis.ablations", "--variants", row.key,
            "--seed", str(seed), "--out", str(folder), "--jobs", "1", "--threads", "1",
            "--quiet", "--locale-dir", str(settings["locale_dir"]), "--lang", settings["lang"],
            *(["--tiny"] if settings.get("size") == "tiny" else []),
            *(["--max-update", str(settings["max_update"])] if settings.get("max_update")
              else [])]
    return [Step("ablations.log", argv=argv)]


def collect(spec: TableSpec, row: Row, folder: Path) -> Dict[str, float]:
    """The variant's figures from ``ablations.json`` (toy) or the recipe's logs (paper)."""
    path = folder / "ablations.json"
    if not path.is_file():
        figures = train_figures(folder / "train.log")
        score = folder / "score-test.json"
        if score.is_file():
            figures["bleu"] = figures["tok_bleu"] = score_figures(score)["bleu4_tokenized"]
        return figures
    found = json.loads(path.read_text())[row.key]
    figures = {k: float(found[k]) for k in ("bleu", "tok_bleu", "valid_nll", "entropy",
                                            "zeros", "norm_loss", "updates")
               if isinstance(found.get(k), (int, float))}
    figures["converged"] = 1.0 if found.get("converged") in (True, "True") else 0.0
    return figures
