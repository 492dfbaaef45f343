"""Translation cells, sentence- and document-level: the real ``fairseq-train`` and
``fairseq-generate``, scored by the recipes' scorer; at paper scale the recipes' scripts.

Toy data: a language's gettext catalogs into English, word level, split by blocks of messages
(:mod:`scripts.reproduce.doc_corpus`); ``sentences`` and ``docs<L>`` (documents of at most L
tokens) share the sentence data's dictionary, so a document model can start from a sentence
model. A row with a ``parent`` starts from its best validated checkpoint, a fresh optimizer.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from scripts.common.atomic_files import write_text_atomic
from scripts.common.child_processes import child_env
from scripts.common.fairseq_cli import fairseq_command
from scripts.common.fairseq_preprocess import preprocess
from scripts.common.fairseq_train import train_command
from scripts.common.gettext_corpus import Pair, build_corpus
from scripts.common.repo_paths import USER_DIR
from scripts.common.run_record import Budget, Run
from scripts.reproduce import patient_train, timed_generate
from scripts.reproduce.claims import NO_MODEL_CLAIM, NoModel
from scripts.reproduce.data_folder import shared_data
from scripts.reproduce.doc_corpus import (
    SEPARATOR,
    Document,
    pack_documents,
    split_documents,
)
from scripts.reproduce.kinds import Step, recipe_steps, stopping_loss
from scripts.reproduce.log_figures import (
    NLL,
    checkpoint_metric_flags,
    decode_times,
    score_figures,
    train_figures,
    validation_curve,
)
from scripts.reproduce.spec import Row, TableSpec
from scripts.reproduce.tables.toy_settings import TRANSLATION_FLAGS, VALID_NLL

SRC, TGT = "xx", "en"  # fairseq's language suffixes of the toy data (any catalog language)
ATTENTION = "attention.json"  # a cell's attention figures, where its table measures them
DATA_KEYS = ("locale_dir", "lang", "block_tokens", "valid_per_mille", "test_per_mille",
             "max_train_pairs", "max_test_docs", "lengths", "vocab")


def length_of(row: Row) -> int:
    """The row's document length in tokens; 0 for sentence-level data."""
    return int(row.point.get("length", 0))


def data_name(length: int) -> str:
    """The data set of documents of ``length`` tokens (0: the sentences)."""
    return "sentences" if length == 0 else f"docs{length}"


def prepare(spec: TableSpec, scale: str, settings: Dict[str, Any], work: Path,
            say: Callable[[str], None]) -> Dict[str, Any]:
    """Build (or reuse) the binarized sentence and document data of the table's rows."""
    if scale == "paper":
        return {"description": f"the {settings['recipe']} recipe's prepared data "
                               f"(scripts/recipes/{settings['recipe']}/prepare.sh)"}
    data = shared_data(work, "translation", {k: settings.get(k) for k in DATA_KEYS},
                       lambda folder: build_data(settings, folder), say)
    # outside the cells' keys: a figure of the data, measured anew for every report
    found = no_model(spec, Path(data["folder"]))
    return {**data, "no_model": found, "references": reference_line(spec, found)}


def dictionary(data: Dict[str, Any]) -> Path | None:
    """The dictionary of every data set of ``data`` (None at paper scale)."""
    if "folder" not in data:
        return None
    return Path(data["folder"]) / "bin" / "dictionary" / f"dict.{SRC}.txt"


def no_model(spec: TableSpec, folder: Path) -> Dict[str, List[NoModel]]:
    """Per row, the valid nll of a model that reads nothing: its targets' unigram entropy."""
    from scripts.demo.reference_summaries import unigram_entropy

    measured: Dict[str, float] = {}
    found = {}
    for row in spec.rows:
        name = data_name(length_of(row))
        dictionary = folder / "bin" / name / f"dict.{TGT}.txt"
        if name not in measured and dictionary.is_file():
            words = {line.split()[0] for line in dictionary.read_text().splitlines()}
            raw = folder / "raw" / name
            targets = [[" ".join(w if w in words else "<unk>" for w in line.split())
                        for line in (raw / f"{split}.{TGT}").read_text().splitlines()]
                       for split in ("train", "valid")]
            # fairseq's dictionary also holds <s>, <pad>, </s> and <unk>, not in the file
            measured[name] = unigram_entropy(*targets, len(words) + 4)
        if name in measured:
            found[row.key] = [NoModel(VALID_NLL, measured[name],
                                      "the target side's unigram entropy")]
    return found


def reference_line(spec: TableSpec, found: Dict[str, List[NoModel]]) -> str | None:
    """The line beside the table: the valid nll of a model that ignores the source."""
    entropies = {"sentences" if length_of(row) == 0 else
                 f"documents of {length_of(row)} tokens": reference.value
                 for row in spec.rows for reference in found.get(row.key, ())}
    if not entropies:
        return None
    figures = "; ".join(f"{bits:.2f} bits on {where}" for where, bits in entropies.items())
    return (f"Without a model: the target side's unigram entropy is {figures} (the valid nll "
            "of a model that reads no source word). A row whose valid nll is at or above it "
            f"has not learnt to translate: {NO_MODEL_CLAIM}")


def build_data(settings: Dict[str, Any], folder: Path) -> Dict[str, Any]:
    """Corpus, documents at every length and their binarized data in ``folder``."""
    from scripts.recipes.lib.prepare_text import moses_tokenize

    # every cleaned, de-duplicated pair in catalog order: the documents are split, not the pairs
    pairs = build_corpus(Path(settings["locale_dir"]), settings["lang"], valid_per_mille=0,
                         test_per_mille=0)["train"]
    blocks = split_documents(pack_documents(pairs, settings["block_tokens"]),
                             settings["valid_per_mille"], settings["test_per_mille"])
    raw = folder / "raw"
    description = []
    per_split = {}
    for split, docs in blocks.items():
        split_pairs = [pair for doc in docs for pair in doc.pairs]
        if split == "train" and settings.get("max_train_pairs"):
            split_pairs = split_pairs[: settings["max_train_pairs"]]
        src = moses_tokenize([p.source for p in split_pairs], settings["lang"], lowercase=True)
        tgt = moses_tokenize([p.target for p in split_pairs], TGT, lowercase=True)
        per_split[split] = [Pair(s, t, pair.catalog) for pair, s, t in zip(split_pairs, src, tgt)]
    lengths = sorted({0, *settings.get("lengths", ())})
    for length in lengths:
        sizes = []
        for split, items in per_split.items():
            # a sentence is a document of one pair; documents are packed to the length
            docs = (pack_documents(items, length) if length else
                    [Document(pair.catalog, (pair,)) for pair in items])
            if length and split == "test" and settings.get("max_test_docs"):
                docs = docs[: settings["max_test_docs"]]
            for suffix, source in ((SRC, True), (TGT, False)):
                write_text_atomic(raw / data_name(length) / f"{split}.{suffix}",
                                  "".join(doc.side(source) + "\n" for doc in docs))
            sizes.append(f"{split} {len(docs)}")
        description.append(f"{data_name(length)}: {', '.join(sizes)}")
    # the dictionary is built from the sentence data ("dictionary" is a copy of its text)
    for split in ("train", "valid", "test"):
        for suffix in (SRC, TGT):
            write_text_atomic(raw / "dictionary" / f"{split}.{suffix}",
                              (raw / "sentences" / f"{split}.{suffix}").read_text())
    binarize(raw, folder / "bin", lengths, settings.get("vocab"))
    return {"description": f"gettext catalogs {settings['locale_dir']}/{settings['lang']} -> "
                           "en, word level, " + "; ".join(description)}


def binarize(raw: Path, out: Path, lengths: List[int], vocab: int | None) -> None:
    """Every data set with the sentence data's dictionary (its ``vocab`` most frequent words)
    plus the sentence separator."""
    def run(name: str, *extra: str) -> None:
        preprocess(raw / name, out / name, child_env(1), SRC, TGT, *extra)

    limit = [] if vocab is None else ["--nwordssrc", str(vocab), "--nwordstgt", str(vocab)]
    run("dictionary", "--dict-only", *limit)
    dictionary = out / "dictionary" / f"dict.{SRC}.txt"
    with open(dictionary, "a", encoding="utf-8") as words:
        words.write(f"{SEPARATOR} 1\n")  # only documents hold it; it must not be <unk>
    for length in lengths:
        run(data_name(length), "--srcdict", str(dictionary))


def score_step(folder: Path, generated: str, results: str, metric: str,
               references: Path | None = None) -> Step:
    """Score a fairseq-generate output with the recipes' scorer, in this process."""
    def run() -> None:
        """score with scripts.recipes.lib.score"""
        from scripts.recipes.lib.score import score

        result = score(folder / generated, metric, references=references)
        write_text_atomic(folder / results, json.dumps(result, indent=1))

    return Step(results, call=run)


def cell_settings(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
                  data: Dict[str, Any]) -> Dict[str, Any]:
    keep = {k: v for k, v in settings.items() if k != "locale_dir"}
    found = {"settings": keep, "data": data.get("description"), "row": row.flags,
             "generate": row.generate_flags, "length": length_of(row), "seed": seed,
             "recipe_model": row.recipe_model, "recipe_env": dict(row.recipe_env)}
    loss = stopping_loss(spec)
    if loss != NLL:  # named only where it is not the nll: those cells keep their keys
        found["validation_loss"] = loss
    return found


def epoch_updates(data_bin: Path, max_tokens: int, positions: int | Tuple[int, int],
                  pair: Tuple[str, str] = (SRC, TGT)) -> int:
    """The updates of one epoch of ``data_bin``'s training split, batched as fairseq-train
    batches it (pairs longer than ``positions`` skipped)."""
    from fairseq.data import Dictionary, LanguagePairDataset, data_utils

    source, target = pair
    words = Dictionary.load(str(data_bin / f"dict.{source}.txt"))
    src, tgt = (data_utils.load_indexed_dataset(
        str(data_bin / f"train.{source}-{target}.{lang}"), words) for lang in pair)
    pairs = LanguagePairDataset(src, src.sizes, words, tgt, tgt.sizes, words)
    limits = positions if isinstance(positions, tuple) else (positions, positions)
    order, _ = pairs.filter_indices_by_size(pairs.ordered_indices(), limits)
    return len(pairs.batch_by_size(order, max_tokens=max_tokens,
                                   required_batch_size_multiple=1))


def plateau_flags(settings: Dict[str, Any], epoch: int, metric: str = NLL) -> List[str]:
    """Every kind's flags to train until the valid loss ``metric`` stops improving: validate
    and save ``validations_per_epoch`` times an epoch of ``epoch`` updates, stop after
    ``patience`` validations without a better loss or at ``max_epoch``."""
    every = max(1, epoch // settings["validations_per_epoch"])
    # no validation at an epoch's end: the patience and stop_rule count validations (no
    # epoch cap, 0: the budget of updates stops it, budget.py)
    beyond = str(settings["max_epoch"] + 1) if settings["max_epoch"] else "1000000"
    return ["--max-epoch", str(settings["max_epoch"]), "--patience", str(settings["patience"]),
            "--validate-interval-updates", str(every), "--save-interval-updates", str(every),
            "--validate-interval", beyond, "--save-interval", beyond,
            "--keep-interval-updates", "1", *checkpoint_metric_flags(metric)]


def best_validation(curve: List[List[float]]) -> List[float] | None:
    """The ``[update, loss]`` of ``checkpoint_best.pt``: the last of the lowest finite losses
    (fairseq replaces it at an equal value too); None if none."""
    finite = [point for point in curve if math.isfinite(point[1])]
    lowest = min((loss for _, loss in finite), default=None)
    return next((point for point in reversed(finite) if point[1] == lowest), None)


def train_step(row: Row, seed: int, settings: Dict[str, Any], data_bin: Path, folder: Path,
               parent: Path | None, extra: List[str]) -> Step:
    """fairseq-train (the demo's command, through :mod:`~scripts.reproduce.patient_train`);
    a continuation starts from the parent's best validated checkpoint, a fresh optimizer at
    the rate the parent's schedule had reached there."""
    run = Run(folder.name, row.label, settings["arch"], [*extra, *row.flags])
    # a run to a plateau is stopped by --patience or --max-epoch only; a fixed budget, or one
    # at its table's budget (budget.py: patience 0), by its --max-update
    updates = 0 if settings.get("patience") else settings["max_update"] or 0
    if parent is not None:
        result = json.loads((parent / "result.json").read_text()) if (
            parent / "result.json").is_file() else {}
        figures = result.get("figures", {})
        curve = [point for point in result.get("curve") or [] if math.isfinite(point[1])]
        best = best_validation(curve) if len(curve) > 1 else None
        run.parent = Run(parent.name, "parent", settings["arch"], [])
        run.start_from = parent / ("checkpoint_best.pt" if best else "checkpoint_last.pt")
        # a parent not trained yet (a dry run): as if its schedule were at its peak
        run.parent.updates = int(best[0] if best else figures.get("updates") or settings[
            "max_update"] or settings["warmup"])
        run.parent.train_seconds = float(figures.get("train_seconds", 0.0))
    size = Budget(layers=settings["layers"], dim=settings["dim"], ffn=settings["ffn"],
                  heads=settings["heads"], max_tokens=settings["max_tokens"],
                  max_update=updates, time_budget_s=settings.get("time_cap_s", 7200.0),
                  warmup=settings["warmup"], lr=settings["lr"],
                  decoder_layers=settings.get("decoder_layers"))
    command, _, _ = train_command(run, size, data_bin, folder.parent,
                                  argparse.Namespace(seed=seed, budget_scale=1.0))
    return Step("train.log", argv=[str(part) for part in patient_train.command(command)],
                trains=True)


def beams(settings: Dict[str, Any]) -> List[int]:
    return list(settings.get("beams", [settings.get("beam", 4)]))


def binarized(data: Dict[str, Any], row: Row) -> Path:
    """The binarized data of ``row``: the sentences, or the documents of its length."""
    return Path(data["folder"]) / "bin" / data_name(length_of(row))


def decoded_checkpoint(settings: Dict[str, Any], folder: Path) -> Path:
    """The model a cell decodes: a plateau run's best checkpoint, a fixed budget's last."""
    return folder / ("checkpoint_best.pt" if "patience" in settings else "checkpoint_last.pt")


def measurements(spec: TableSpec, row: Row, scale: str, settings: Dict[str, Any],
                 data: Dict[str, Any], checkpoint: Path, folder: Path) -> List[Step]:
    """With ``attention_sentences``: the attention of ``checkpoint`` on that many validation
    sentences (``scripts/analysis/analyze_attention.py``)."""
    sentences = settings.get("attention_sentences")
    if scale == "paper" or not sentences:
        return []
    return [Step("attention.log", argv=[
        sys.executable, "-m", "scripts.analysis.analyze_attention", str(binarized(data, row)),
        "--path", str(checkpoint), "--labels", row.key, "--out", str(folder / "attention"),
        "--gen-subset", "valid", "--max-sentences", str(sentences),
        "--json", str(folder / ATTENTION)])]


def measured(folder: Path) -> Dict[str, float]:
    """:func:`measurements`' mean ``entropy`` (nats) and ``zeros`` (share of zero weights)."""
    path = folder / ATTENTION
    if not path.is_file():
        return {}
    (model,) = json.loads(path.read_text())["models"]
    means = model["attention"]
    return {key: math.nan if means[key] is None else float(means[key])
            for key in ("entropy", "zeros")}


def steps(spec: TableSpec, row: Row, seed: int, scale: str, settings: Dict[str, Any],
          data: Dict[str, Any], folder: Path, parent: Path | None) -> List[Step]:
    if scale == "paper":
        flags = [*row.recipe_flags, "--seed", str(seed)]
        if parent is not None:
            flags += ["--finetune-from-model", str(parent / "checkpoint_best.pt")]
        # the recipe's evaluate.sh picks the decoding of its MODEL; only the beam is ours
        evaluations = [(f"score-test-beam{beam}.json", ["--beam", str(beam)])
                       for beam in beams(settings)]
        found = recipe_steps(settings["recipe"], row.recipe_model, dict(row.recipe_env),
                             str(folder), flags, evaluations)
        return found[:1] if row.hidden else found
    length = length_of(row)
    data_bin = binarized(data, row)
    positions = max(256, 2 * length + 16)
    # the paper's attention dropout and label smoothing; a row's own flags come last
    extra = [*TRANSLATION_FLAGS, "--max-source-positions", str(positions),
             "--max-target-positions", str(positions), "--log-interval", "10",
             "--max-tokens", str(max(settings["max_tokens"], positions))]
    if "patience" in settings:
        extra += plateau_flags(settings, epoch_updates(
            data_bin, max(settings["max_tokens"], positions), positions), stopping_loss(spec))
    found = [train_step(row, seed, settings, data_bin, folder, parent, extra)]
    if row.hidden:
        return found
    checkpoint = decoded_checkpoint(settings, folder)
    for beam in beams(settings):
        out = f"generate-test-beam{beam}.txt"
        found.append(Step(out, argv=timed_generate.command([
            fairseq_command("fairseq-generate"), str(data_bin), "--user-dir", USER_DIR,
            "--path", str(checkpoint), "--gen-subset", "test", "--cpu",
            "--beam", str(beam), "--max-tokens", str(max(4096, positions)),
            "--max-source-positions", str(positions), "--max-target-positions", str(positions),
            "--max-len-a", "1.2", "--max-len-b", "10", "--num-workers", "0",
            "--required-batch-size-multiple", "1", *row.generate_flags]), timed=True))
        found.append(score_step(folder, out, f"score-test-beam{beam}.json", "bleu"))
    return found + measurements(spec, row, scale, settings, data, checkpoint, folder)


def decoded_nll(log: Path, metric: str) -> float:
    """The valid nll of ``checkpoint_best.pt`` of a training stopped on ``metric``; NaN
    where there is none."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    best = best_validation(validation_curve(lines, metric))
    return math.nan if best is None else dict(validation_curve(lines, NLL)).get(
        best[0], math.nan)


def collect(spec: TableSpec, row: Row, folder: Path) -> Dict[str, float]:
    """Training figures, per beam BLEU (``bleu_beam<B>``; ``bleu`` the first's), decoding
    seconds and :func:`measured`; ``valid_nll`` is the decoded model's."""
    loss = stopping_loss(spec)
    figures = train_figures(folder / "train.log", loss)
    if VALID_NLL.key not in figures:
        figures[VALID_NLL.key] = decoded_nll(folder / "train.log", loss)
    scored = sorted(folder.glob("score-test-beam*.json"))
    if not row.hidden and not scored:
        raise FileNotFoundError(f"no score-test-beam*.json in {folder}: not decoded yet")
    for path in scored:
        beam = path.stem.rsplit("beam", 1)[1]
        scores = score_figures(path)
        # BLEU recipes give bleu4_tokenized; a ROUGE recipe (Gigaword at paper scale) rouge1
        bleu = scores.get("bleu4_tokenized", scores.get("rouge1", float("nan")))
        figures[f"bleu_beam{beam}"] = bleu
        figures.setdefault("bleu", bleu)
        generated = folder / f"generate-test-beam{beam}.txt"
        if generated.is_file():
            for name, seconds in decode_times(generated).items():
                figures[f"{name}_beam{beam}"] = seconds
                figures.setdefault(name, seconds)
    return {**figures, **measured(folder)}
