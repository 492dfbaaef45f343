"""Summarization cells (Pyramidion paper): one ``pyramidion_base`` model per row, trained to
a plateau as the translation tables train, ROUGE by the recipes' scorer, costs in CPU
seconds. Toy data: the machine's manual pages, each summarised by its NAME line. Paper
scale: ``scripts/recipes/long_doc_summarization`` (``DATASET=arxiv``).
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence

from scripts.common.child_processes import child_env
from scripts.common.fairseq_cli import fairseq_command
from scripts.common.fairseq_preprocess import preprocess
from scripts.common.repo_paths import USER_DIR
from scripts.reproduce import timed_generate
from scripts.reproduce.claims import NO_MODEL_CLAIM, NoModel
from scripts.reproduce.data_folder import shared_data
from scripts.reproduce.kinds import Step, recipe_steps, translation
from scripts.reproduce.kinds.translation import plateau_flags, score_step, train_step
from scripts.reproduce.log_figures import decode_times, score_figures, train_figures
from scripts.reproduce.spec import Row, TableSpec
from scripts.reproduce.tables.toy_settings import ROUGE, TRANSLATION_FLAGS, VALID_NLL

if TYPE_CHECKING:
    from scripts.demo.summarization import SummaryReferences

DATA_KEYS = ("man_dir", "source_tokens", "target_tokens", "vocab", "max_test",
             "min_train_docs", "heldout_per_mille", "generated_docs")


def prepare(spec: TableSpec, scale: str, settings: Dict[str, Any], work: Path,
            say: Callable[[str], None]) -> Dict[str, Any]:
    if scale == "paper":
        return {"description": "the long_doc_summarization recipe's prepared data "
                               "(DATASET=arxiv scripts/recipes/long_doc_summarization/prepare.sh)"}
    data = shared_data(work, "summarization", {k: settings.get(k) for k in DATA_KEYS},
                       lambda folder: build_data(settings, folder, say), say)
    # outside the cells' keys: figures of the data, measured anew for every report
    from scripts.demo.summarization import SummaryReferences
    from scripts.demo.summary_data import TARGET

    folder = Path(data["folder"])
    found = SummaryReferences.measure(folder / "prep", folder / "bin" / f"dict.{TARGET}.txt")
    trivial = found.scores["trivial"]
    no_model = [NoModel(VALID_NLL, found.entropy_bits, "the summaries' unigram entropy"),
                *(NoModel(metric, trivial[metric.key], "the trivial output's")
                  for metric in ROUGE)]
    return {**data, "references": reference_line(found),
            "no_model": dict.fromkeys((row.key for row in spec.rows), no_model)}


def reference_line(found: SummaryReferences) -> str:
    """What a model must beat on these test pages: the demo's reference outputs and the
    summaries' unigram entropy."""
    trivial, lead = found.scores["trivial"], found.scores["lead"]
    return (f"Without a model, on the same test pages: the {found.words} most frequent "
            f"summary words for every page (trivial) score ROUGE-1 {trivial['rouge1']:.2f}, "
            f"ROUGE-2 {trivial['rouge2']:.2f}; the page's first {found.words} words (lead) "
            f"ROUGE-1 {lead['rouge1']:.2f}, ROUGE-2 {lead['rouge2']:.2f}; the summaries' "
            f"unigram entropy is {found.entropy_bits:.2f} bits (a valid nll well below it has "
            "learnt from the page). A row whose ROUGE is at or below the trivial output's picks "
            "no more of the page's words than a constant output does, and a row whose valid "
            f"nll is at or above the entropy has not read the page: {NO_MODEL_CLAIM}")


def build_data(settings: Dict[str, Any], folder: Path,
               say: Callable[[str], None]) -> Dict[str, Any]:
    """The demo's manual-page summaries, cut to size and binarized, in ``folder``."""
    from scripts.demo.summary_data import SummaryScale, build_summary_data

    # every size but the time cap and the Transpooler row is one of the table's settings
    sizes = SummaryScale(**{field.name: settings[field.name] for field in fields(SummaryScale)
                            if field.name not in ("safety_cap_s", "transpooler")},
                         safety_cap_s=1e9)
    for sub in ("raw", "prep"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    description = build_summary_data(Path(settings["man_dir"]), sizes, folder / "raw",
                                     folder / "prep", say=say)
    preprocess(folder / "prep", folder / "bin", child_env(1), "doc", "sum")
    return {"description": description}


def cell_settings(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
                  data: Dict[str, Any]) -> Dict[str, Any]:
    keep = {k: v for k, v in settings.items() if k != "man_dir"}
    return {"settings": keep, "data": data.get("description"), "row": list(row.flags),
            "seed": seed, "recipe_model": row.recipe_model}


_LENGTH = re.compile(r"\bL(?:/(\d+))?\b")


def resolve(flags: Sequence[str], length: int) -> List[str]:
    """Rows write lengths as ``L``, ``L/2``, ``L/4`` of the input length."""
    return [_LENGTH.sub(lambda m: str(length // int(m.group(1) or 1)), flag) for flag in flags]


def steps(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
          data: Dict[str, Any], folder: Path, parent: Path | None) -> List[Step]:
    if scale == "paper":
        return recipe_steps("long_doc_summarization", row.recipe_model,
                            {"DATASET": settings["dataset"], **row.recipe_env}, str(folder),
                            [*row.recipe_flags, "--seed", str(seed)])
    from scripts.demo.summary_data import SOURCE, TARGET

    length, target = settings["source_tokens"], settings["target_tokens"]
    data_bin = Path(data["folder"]) / "bin"
    positions = ["--max-source-positions", str(length),
                 "--max-target-positions", str(target + 8)]
    extra = [*positions, *TRANSLATION_FLAGS, "--log-interval", "10"]
    # the translation kind's count, read through its module (the command tests stub it)
    extra += plateau_flags(settings, translation.epoch_updates(
        data_bin, settings["max_tokens"], (length, target + 8), (SOURCE, TARGET)))
    train = train_step(replace(row, flags=tuple(resolve(row.flags, length))), seed,
                       {**settings, "arch": "pyramidion_base"}, data_bin, folder, None, extra)
    generate = timed_generate.command([
                fairseq_command("fairseq-generate"), str(data_bin), "--user-dir", USER_DIR,
                "--path", str(folder / "checkpoint_best.pt"), "--gen-subset", "test", "--cpu",
                "--beam", str(settings["beam"]), "--post-process", "sentencepiece",
                "--max-len-a", "0", "--max-len-b", str(target), *positions,
                "--max-tokens", str(8 * length), "--num-workers", "0",
                "--required-batch-size-multiple", "1"])
    score = score_step(folder, "generate-test.txt", "score-test.json", "rouge",
                       references=Path(data["folder"]) / "prep" / "test.reference")
    if row.hidden:  # a grid cell chooses the rate: trained, not decoded
        return [train]
    return [train, Step("generate-test.txt", argv=generate, timed=True), score]


def collect(spec: TableSpec, row: Row, folder: Path) -> Dict[str, float]:
    """The training figures and, but for a grid cell, ROUGE-1/2/L and decoding seconds."""
    figures = train_figures(folder / "train.log")
    if row.hidden:
        return figures
    scores = score_figures(folder / "score-test.json")
    figures.update({k: scores[k] for k in ("rouge1", "rouge2", "rougeL") if k in scores})
    generated = folder / "generate-test.txt"
    if generated.is_file():
        figures.update(decode_times(generated))
    return figures
