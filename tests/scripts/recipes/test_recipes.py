"""The reproduction recipes, run end to end on tiny corpora in the real published formats.

For every data set: ``prepare.sh`` on a fixture archive/folder (tags, XML, sgm, Europarl
sessions, jsonl, json), ``train.sh MODEL -- <shrink flags>`` for three updates and
``evaluate.sh MODEL``, then checks of the binarized data (sentence counts), the checkpoint
(architecture, updates) and the score file. Plus: a second ``prepare.sh`` is a no-op, a run
without the input variable names it, a corrupt archive fails its checksum leaving nothing,
an interrupted step leaves no half output, every script has ``-h``, and every model preset's
``fairseq-train``/``fairseq-generate`` command is accepted by fairseq's own parsers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from scripts.recipes.lib.prepare_text import read_lines

from helpers import REPO_ROOT, run_command
from recipe_fixtures import (
    LONG_ANSWER,
    LONG_ANSWER_AT,
    MARKER,
    build_cohan,
    build_europarl,
    build_europarl_concatenated,
    build_gigaword,
    build_iwslt14,
    build_squad,
    build_wmt14,
    long_squad_paragraph,
)

SCRIPTS = REPO_ROOT / "scripts" / "recipes"

# a 1+1-layer model of width 16, three updates, no epoch checkpoints; batches of any size
# (fairseq-fixed 0.12.3.1 drops the sentences that do not fill a multiple of
# --required-batch-size-multiple, which empties the fixtures' 3-6 sentence valid sets)
SHRINK = [
    "--cpu", "--max-update", "3", "--update-freq", "1", "--max-tokens", "2000",
    "--required-batch-size-multiple", "1",
    "--warmup-updates", "1", "--lr", "0.003", "--dropout", "0.1",
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--no-epoch-checkpoints", "--num-workers", "0", "--log-format", "simple",
    "--log-interval", "1", "--no-progress-bar", "--seed", "1",
]  # fmt: skip


@dataclass
class Recipe:
    name: str  # data folder under DATA_ROOT and checkpoint folder under CHECKPOINT_ROOT
    folder: str  # scripts/<folder>
    build: Callable[[Path], Path]
    variable: str
    env: dict
    model: str
    arch: str
    data_bin: str  # relative to DATA_ROOT
    langs: tuple
    metrics: tuple
    models: tuple
    text: str  # the text folder (relative to DATA_ROOT) that was binarized
    train_flags: list = field(default_factory=list)
    eval_flags: list = field(default_factory=lambda: ["--cpu", "--beam", "2"])
    # train.sh and evaluate.sh too; off where another data set runs the same scripts and the
    # same code paths (WMT14 as IWSLT14, PubMed as arXiv, Gigaword as SQuAD) to keep CI short
    train: bool = True


BLEU = ("bleu4_tokenized", "sacrebleu")
ROUGE = ("rouge1", "rouge2", "rougeL")
TRANSLATION_MODELS = ("transformer", "relu_former", "relu_former_softmax_cross", "sparsemax",
                      "entmax15", "rela", "sparse_softmax")
SUMMARIZATION_MODELS = ("transformer", "vanilla", "blockwise", "transpooler", "transpooler_4x",
                        "pyramidion", "deep_pyramidion")
# the recipe's minimum summary length (72) is longer than the fixtures' abstracts
SUMMARY_EVAL = ["--cpu", "--beam", "2", "--min-len", "2", "--max-len-b", "40"]

RECIPES = [
    Recipe("iwslt14_de_en", "iwslt14_de_en", build_iwslt14, "IWSLT14_ARCHIVE",
           {"IWSLT14_BPE_MERGES": "50"}, "relu_former", "relu_former_iwslt_de_en",
           "iwslt14_de_en/data-bin", ("de", "en"), BLEU, TRANSLATION_MODELS, "iwslt14_de_en/bpe"),
    Recipe("wmt14_en_de", "wmt14_en_de", build_wmt14, "WMT14_DIR",
           {"WMT14_BPE_MERGES": "50"}, "sparsemax", "relu_former_wmt_en_de",
           "wmt14_en_de/data-bin", ("en", "de"), BLEU, TRANSLATION_MODELS, "wmt14_en_de/bpe",
           train=False),
    Recipe("europarl7_doc/seg64", "europarl7_doc", build_europarl, "EUROPARL_ARCHIVE",
           {"EUROPARL_BPE_MERGES": "50", "EUROPARL_HOLDOUT_EVERY": "6",
            "EUROPARL_SEGMENT_LENGTHS": "16 64", "SEGMENT_LENGTH": "64"},
           "entmax15", "relu_former_doc", "europarl7_doc/data-bin/seg64", ("en", "de"), BLEU,
           TRANSLATION_MODELS[:6], "europarl7_doc/segments/seg64"),
    Recipe("arxiv", "long_doc_summarization", lambda f: build_cohan(f, "arxiv"),
           "ARXIV_ARCHIVE", {"DATASET": "arxiv", "SPM_VOCAB_SIZE": "100",
                             "MAX_SOURCE_TOKENS": "256", "MAX_TARGET_TOKENS": "64"},
           "pyramidion", "pyramidion_base", "arxiv/data-bin", ("src", "tgt"), ROUGE,
           SUMMARIZATION_MODELS, "arxiv/spm",
           ["--encoder-layers", "2", "--pooling-schedule", "1:64,2:32"], SUMMARY_EVAL),
    Recipe("pubmed", "long_doc_summarization", lambda f: build_cohan(f, "pubmed"),
           "PUBMED_ARCHIVE", {"DATASET": "pubmed", "SPM_VOCAB_SIZE": "100",
                              "MAX_SOURCE_TOKENS": "256", "MAX_TARGET_TOKENS": "64"},
           "transpooler", "transpooler_base", "pubmed/data-bin", ("src", "tgt"), ROUGE,
           SUMMARIZATION_MODELS, "pubmed/spm", ["--pooling-schedule", "last:16"], SUMMARY_EVAL,
           train=False),
    Recipe("gigaword_10k", "gigaword_10k", build_gigaword, "GIGAWORD_ARCHIVE",
           {"GIGAWORD_BPE_MERGES": "50", "GIGAWORD_TRAIN_SIZE": "120",
            "GIGAWORD_TRAIN_SUBSET": "first"}, "sparse_softmax",
           "transformer_iwslt_de_en", "gigaword_10k/data-bin", ("src", "tgt"), ROUGE,
           ("transformer", "sparse_softmax"), "gigaword_10k/bpe", ["--sparse-softmax-k", "5"],
           train=False),
    Recipe("squad_qg", "squad_qg", build_squad, "SQUAD_DIR", {"SQUAD_BPE_MERGES": "50"},
           "transformer", "transformer_iwslt_de_en", "squad_qg/data-bin", ("src", "tgt"),
           ("bleu1_tokenized", "bleu2_tokenized", "bleu3_tokenized", "bleu4_tokenized"),
           ("transformer", "sparse_softmax"), "squad_qg/bpe"),
]
IDS = [r.name.split("/")[0] for r in RECIPES]


def script(recipe: Recipe, name: str) -> Path:
    return SCRIPTS / recipe.folder / f"{name}.sh"


def recipe_env(recipe: Recipe, root: Path, **extra: str) -> dict:
    env = {"DATA_ROOT": str(root / "data"), "CHECKPOINT_ROOT": str(root / "ckpt"),
           "WORKERS": "1", "PYTHON": sys.executable, **recipe.env, **extra}
    return env


@pytest.fixture(autouse=True)
def _no_inherited_inputs(monkeypatch):
    for r in RECIPES:
        monkeypatch.delenv(r.variable, raising=False)
        monkeypatch.delenv(f"{r.variable}_SHA256", raising=False)
    monkeypatch.delenv("DATASET", raising=False)


def snapshot(folder: Path) -> dict:
    """Every file under folder with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def count_lines(path: Path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def binarized_sizes(data_bin: Path, langs: tuple) -> dict:
    """Sentences in each binarized split, read with fairseq's own dataset reader."""
    from fairseq.data import data_utils

    src, tgt = langs
    sizes = {}
    for split in ("train", "valid", "test"):
        for lang in langs:
            ds = data_utils.load_indexed_dataset(str(data_bin / f"{split}.{src}-{tgt}.{lang}"),
                                                 None)
            assert ds is not None, f"{split}.{lang} missing in {data_bin}"
            sizes[split, lang] = len(ds)
    return sizes


def markers(path: Path) -> list[list[str]]:
    """The marker tokens of each line of a BPE-segmented file, in order."""
    from scripts.recipes.lib.prepare_text import read_lines, remove_bpe

    return [MARKER.findall(remove_bpe(line)) for line in read_lines(path)]


def assert_segments_hold_whole_pairs(segments: Path, aligned: Path, length: int | None) -> None:
    """Every packed segment pair holds the same sentences (marker tokens) on both sides, in
    the same order; together the segments hold every aligned sentence exactly once; and a
    segment with more than one sentence stays below ``length`` as G-Transformer counts."""
    from scripts.recipes.lib.prepare_text import pair_length, read_lines

    for split in ("train", "valid", "test"):
        src, tgt = markers(segments / f"{split}.en"), markers(segments / f"{split}.de")
        assert len(src) == len(tgt) > 0, split
        for number, (s, t) in enumerate(zip(src, tgt)):
            assert s == t and s, (split, number, s, t)
        aligned_markers = [m for line in markers(aligned / f"{split}.en") for m in line]
        assert [m for line in src for m in line] == aligned_markers, split
        if length is None:
            continue
        # the segment's length, pair by pair, from the BPE'd aligned sentences it holds
        sizes = dict(zip(aligned_markers, (pair_length(s, t) for s, t in zip(
            read_lines(aligned / f"{split}.en"), read_lines(aligned / f"{split}.de")))))
        for line in src:
            if len(line) > 1:
                assert sum(sizes[m] for m in line) < length, (split, line)


# ---------------------------------------------------------------------------- end to end
@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_prepare_train_evaluate(recipe: Recipe, tmp_path: Path):
    archive = recipe.build(tmp_path / "download")
    env = recipe_env(recipe, tmp_path, **{recipe.variable: str(archive)})
    data_root = tmp_path / "data"

    if recipe.name == "iwslt14_de_en":
        # an interrupted step: BPE fails half-way; nothing of it may remain, earlier steps stay
        bad = run_command([script(recipe, "prepare")], env={**env, "IWSLT14_BPE_MERGES": "x"},
                          check=False)
        assert bad.returncode != 0
        work = data_root / "iwslt14_de_en"
        assert (work / "tok" / ".done").is_file()
        assert not list(work.glob("bpe*")), list(work.glob("bpe*"))

    if recipe.name == "squad_qg":
        # files of the right names but not SQuAD's JSON: one message, no traceback, and the
        # right folder then prepares without any cleaning up
        broken = tmp_path / "broken"
        broken.mkdir()
        for name in ("train.json", "dev.json", "test.json"):
            (broken / name).write_text("<html>not found</html>")
        bad = run_command([script(recipe, "prepare")], env={**env, recipe.variable: str(broken)},
                          check=False)
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert "train.json is not JSON" in bad.stderr

    prep = run_command([script(recipe, "prepare")], env=env)
    assert "outputs:" in prep.stderr
    if recipe.name == "iwslt14_de_en":
        assert "step tokenize: done already" in prep.stderr
    if recipe.name.startswith("europarl7_doc"):
        # raw paragraphs, tags, paragraphs longer than 16 tokens: whole pairs at every length
        for length in (16, 64):
            assert_segments_hold_whole_pairs(data_root / f"europarl7_doc/segments/seg{length}",
                                             data_root / "europarl7_doc/bpe", length)
        fixture_markers = set(MARKER.findall(
            "".join(p.read_text() for p in (tmp_path / "download").rglob("txt/en/*.txt"))))
        aligned = {m for split in ("train", "valid", "test")
                   for line in markers(data_root / f"europarl7_doc/bpe/{split}.en") for m in line}
        assert aligned <= fixture_markers and len(aligned) >= 0.9 * len(fixture_markers)
        # truecased between tokenisation and BPE (G-Transformer's preparation): sentence-
        # initial words take their usual casing, so fewer lines start with a capital
        for lang in ("en", "de"):
            tok = read_lines(data_root / f"europarl7_doc/tok/train.{lang}")
            cased = read_lines(data_root / f"europarl7_doc/truecase/train.{lang}")
            assert len(tok) == len(cased) and [t.lower() for t in tok] == [c.lower() for c in cased]
            capitals = [sum(line[:1].isupper() for line in lines) for lines in (tok, cased)]
            assert capitals[1] < capitals[0], (lang, capitals)
        # the log counts the pairs that are segments of their own (training split at 16)
        logged = [line for line in prep.stderr.splitlines() if "below 16 tokens" in line]
        assert int(logged[0].split("; ")[1].split()[0]) > 0, logged

    # binarized data: every split of both sides, as many sentences as the text it came from
    data_bin = data_root / recipe.data_bin
    assert (data_bin / ".done").is_file()
    sizes = binarized_sizes(data_bin, recipe.langs)
    text_dir = data_root / recipe.text
    for (split, lang), n in sizes.items():
        assert n == count_lines(text_dir / f"{split}.{lang}") > 0, (split, lang, n)

    # a second run is a no-op, even without the input variable
    before = snapshot(data_root)
    env_again = {k: v for k, v in env.items() if k != recipe.variable}
    again = run_command([script(recipe, "prepare")], env=env_again)
    assert snapshot(data_root) == before
    assert "running" not in again.stderr and "done already" in again.stderr
    if recipe.name == "squad_qg":
        # the 600-token paragraph keeps the 464-token chunk that holds its answer
        long = [line for line in read_lines(data_root / "squad_qg/text/train.src")
                if line.startswith(f"{LONG_ANSWER} <sep>")]
        assert len(long) == 1
        passage = long[0].split(" <sep> ", 1)[1].split()
        assert len(passage) == 464 and LONG_ANSWER in passage
    if recipe.name == "wmt14_en_de":  # newstest2013 is the validation set, kept whole
        assert sizes["valid", "en"] == 8
    if recipe.name == "gigaword_10k":
        assert "GIGAWORD_TRAIN_SUBSET=first: the first 120 pairs" in prep.stderr
        assert sizes["train", "src"] == 120
        # an archive laid out as UniLM ships it: its 10k subset, WordPiece joined back (its
        # text alone: the steps after it, which the first archive's run above checked, are
        # marked done and skipped, as a recipe skips any finished step)
        published = build_gigaword(tmp_path / "published", published_10k=30)
        for step in ("bpe", "data-bin"):
            (tmp_path / "data2" / "gigaword_10k" / step).mkdir(parents=True)
            (tmp_path / "data2" / "gigaword_10k" / step / ".done").touch()
        unilm_env = {k: v for k, v in env.items() if k != "GIGAWORD_TRAIN_SUBSET"}
        run_command([script(recipe, "prepare")], env={
            **unilm_env, recipe.variable: str(published), "DATA_ROOT": str(tmp_path / "data2")})
        train = read_lines(tmp_path / "data2" / "gigaword_10k" / "text" / "train.src")
        assert len(train) == 30 and not any("##" in line for line in train)
        assert sum(" man " in f" {line} " for line in train) > 0
    if not recipe.train:
        return

    # train a few updates of the shrunk model
    train = run_command([script(recipe, "train"), recipe.model, "--", *SHRINK,
                         *recipe.train_flags], env=env)
    save_dir = tmp_path / "ckpt" / recipe.name / recipe.model
    assert f"checkpoints: {save_dir}" in train.stderr
    import torch

    import relu_former.plugin  # noqa: F401  (allowlists fairseq's checkpoint globals)

    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["cfg"]["model"]._name == recipe.arch
    assert state["optimizer_history"][-1]["num_updates"] == 3

    # evaluate: hypotheses for every test sentence and a score file
    evaluate = run_command([script(recipe, "evaluate"), recipe.model, "--", *recipe.eval_flags],
                           env=env)
    results = json.loads((save_dir / "score-test.json").read_text())
    assert json.loads(evaluate.stdout) == results
    assert results["sentences"] == sizes["test", recipe.langs[1]]
    for key in recipe.metrics:
        assert 0.0 <= results[key] <= 100.0 and math.isfinite(results[key]), (key, results)
    if "sacrebleu" in recipe.metrics:
        assert results["sacrebleu_signature"].startswith("nrefs:1|case:")
    if recipe.name == "squad_qg":
        # several questions about one input are one multi-reference item
        assert results["distinct_sources"] < results["sentences"]
        # fine-tuning the trained softmax model with the sparse-softmax loss, decoded top-k
        pretrained = save_dir / "checkpoint_last.pt"
        tuned_env = {**env, "PRETRAINED": str(pretrained)}
        run_command([script(recipe, "train"), "sparse_softmax", "--", *SHRINK, "--sparse-softmax-k",
                     "3"], env=tuned_env)
        tuned_dir = tmp_path / "ckpt" / recipe.name / "sparse_softmax-finetuned"
        tuned = torch.load(tuned_dir / "checkpoint_last.pt", map_location="cpu",
                           weights_only=True)
        assert tuned["cfg"]["checkpoint"]["finetune_from_model"] == str(pretrained)
        assert tuned["cfg"]["criterion"]["_name"] == "sparse_softmax_cross_entropy"
        log = (tuned_dir / "train.log").read_text()
        assert f"loading pretrained model from {pretrained}" in log
        decoded = run_command([script(recipe, "evaluate"), "sparse_softmax", "--",
                               *recipe.eval_flags], env=tuned_env)
        assert json.loads(decoded.stdout)["sentences"] == results["sentences"]
        assert "'_name': 'translation_sparse_decoding'" in (
            tuned_dir / "generate-test.log").read_text()


# ---------------------------------------------------------------------------- failures
def test_gigaword_without_the_10k_subset_is_an_error_naming_the_choice(tmp_path: Path):
    """An archive without UniLM's train.src.10k/train.tgt.10k does not silently train on
    another subset: one error naming GIGAWORD_TRAIN_SUBSET, nothing extracted."""
    recipe = next(r for r in RECIPES if r.name == "gigaword_10k")
    archive = build_gigaword(tmp_path / "download")
    env = recipe_env(recipe, tmp_path, GIGAWORD_ARCHIVE=str(archive))
    env.pop("GIGAWORD_TRAIN_SUBSET")
    proc = run_command([script(recipe, "prepare")], env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "train.src.10k" in errors[0], proc.stderr
    assert "GIGAWORD_TRAIN_SUBSET=first" in errors[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "data" / "gigaword_10k" / "text").exists()
    bad = run_command([script(recipe, "prepare")], env={**env, "GIGAWORD_TRAIN_SUBSET": "all"},
                      check=False)
    assert bad.returncode == 2 and "GIGAWORD_TRAIN_SUBSET=all: choose unilm" in bad.stderr


@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_missing_input_names_the_variable(recipe: Recipe, tmp_path: Path):
    proc = run_command([script(recipe, "prepare")], env=recipe_env(recipe, tmp_path),
                       check=False)
    assert proc.returncode == 2
    assert f"set {recipe.variable} " in proc.stderr
    assert "Fetch " in proc.stderr  # says what to fetch
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*"))


def _corrupt(path: Path) -> None:
    if path.is_dir():
        path = sorted(p for p in path.iterdir() if p.is_file())[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_corrupt_input_fails_checksum_and_leaves_nothing(recipe: Recipe, tmp_path: Path):
    source = recipe.build(tmp_path / "download")
    extra = {recipe.variable: str(source)}
    if source.is_dir():
        sums = tmp_path / "SHA256SUMS"
        sums.write_text("".join(
            f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
            for p in sorted(source.iterdir()) if p.is_file()))
        extra[f"{recipe.variable}_SHA256SUMS"] = str(sums)
    else:
        extra[f"{recipe.variable}_SHA256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    _corrupt(source)
    proc = run_command([script(recipe, "prepare")], env=recipe_env(recipe, tmp_path, **extra),
                       check=False)
    assert proc.returncode == 3, proc.stderr
    assert "checksum mismatch" in proc.stderr
    data = tmp_path / "data"
    assert not data.exists() or not any(data.rglob("*")), list(data.rglob("*"))


@pytest.mark.slow
def test_wrong_archive_then_the_right_one_prepares_without_cleanup(tmp_path: Path):
    """A valid archive of another data set is refused before the fetch step counts as done,
    with one message and no traceback; the right archive (here the document-level
    concatenated_en2de split) then prepares, every segment holding whole sentence pairs (its
    text alone: its binarization, the step that the raw sessions' run of
    test_prepare_train_evaluate checks, is marked done and skipped, as a recipe skips any
    finished step)."""
    recipe = next(r for r in RECIPES if r.folder == "europarl7_doc")
    wrong = build_gigaword(tmp_path / "other")
    right = build_europarl_concatenated(tmp_path / "download")
    env = recipe_env(recipe, tmp_path, EUROPARL_SEGMENT_LENGTHS="24")
    bad = run_command([script(recipe, "prepare")], env={**env, recipe.variable: str(wrong)},
                      check=False)
    assert bad.returncode == 2, bad.stderr
    assert "Traceback" not in bad.stderr
    errors = [line for line in bad.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "is not the Europarl document data" in errors[0], bad.stderr
    assert "concatenated_en2de_train_en.txt" in errors[0]
    work = tmp_path / "data" / "europarl7_doc"
    assert not (work / "orig").exists() and not list(work.glob("orig.tmp.*"))

    (work / "data-bin" / "seg24").mkdir(parents=True)
    (work / "data-bin" / "seg24" / ".done").touch()
    good = run_command([script(recipe, "prepare")], env={**env, recipe.variable: str(right)})
    assert "train: 12 documents" in good.stderr
    assert "step binarize-24: done already" in good.stderr
    assert_segments_hold_whole_pairs(work / "segments" / "seg24", work / "bpe", 24)
    assert len(set(read_lines(work / "text" / "test.docid"))) == 2


def test_good_checksum_is_accepted(tmp_path: Path):
    recipe = RECIPES[0]
    archive = recipe.build(tmp_path / "download")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    # stop right after the fetch step: the tokenizer interpreter does not exist
    env = recipe_env(recipe, tmp_path, IWSLT14_ARCHIVE=str(archive),
                     IWSLT14_ARCHIVE_SHA256=digest, PYTHON=str(tmp_path / "no-python"))
    proc = run_command([script(recipe, "prepare")], env=env, check=False)
    assert "sha256 of de-en.tgz verified" in proc.stderr
    assert (tmp_path / "data" / "iwslt14_de_en" / "orig" / ".done").is_file()
    assert not list((tmp_path / "data" / "iwslt14_de_en").glob("*.tmp.*"))


# ---------------------------------------------------------------------------- interface
ALL_SCRIPTS = sorted(p for p in SCRIPTS.glob("*/*.sh") if p.parent.name != "lib")


@pytest.mark.parametrize("path", ALL_SCRIPTS, ids=[f"{p.parent.name}/{p.name}"
                                                   for p in ALL_SCRIPTS])
def test_every_script_has_help_and_strict_mode(path: Path):
    assert "set -euo pipefail" in path.read_text()
    assert os.access(path, os.X_OK)
    proc = run_command([path, "-h"], env={"DATASET": "arxiv"})
    assert proc.stdout.startswith("usage:")
    assert "Output" in proc.stdout or "output" in proc.stdout


def test_unknown_model_is_refused(tmp_path: Path):
    proc = run_command([SCRIPTS / "squad_qg" / "train.sh", "pyramidion"], check=False,
                       env=recipe_env(RECIPES[-1], tmp_path))
    assert proc.returncode != 0
    assert "unknown model 'pyramidion'" in proc.stderr and "sparse_softmax" in proc.stderr


def parsed_by_fairseq(commands: list) -> tuple[list, list]:
    """``(train_args, failures)``: each ``("train" | "generate", argv)`` parsed by fairseq's
    own parser, in this process (as ``fairseq-train`` parses its command line; 4 s of
    imports less than a new interpreter); a parser refusal is a failure."""
    from fairseq import options

    parsed, failures = [], []
    for kind, argv in commands:
        parser = (options.get_training_parser() if kind == "train"
                  else options.get_generation_parser())
        try:
            args = options.parse_args_and_arch(parser, argv)
        except SystemExit:
            failures.append(argv)
            continue
        if kind == "train":
            parsed.append(args)
    return parsed, failures


def test_every_model_preset_is_accepted_by_fairseq(tmp_path: Path):
    """Dry runs of train.sh/evaluate.sh for every data set and model, parsed by fairseq."""
    commands = []
    for recipe in RECIPES:
        env = recipe_env(recipe, tmp_path)
        for model in recipe.models:
            for kind in ("train", "evaluate"):
                proc = run_command([script(recipe, kind), "--dry-run", model], env=env)
                words = shlex.split(proc.stdout)  # undoes the dry run's printf %q
                assert Path(words[0]).name == ("fairseq-train" if kind == "train"
                                               else "fairseq-generate")
                commands.append(("train" if kind == "train" else "generate", words[1:]))
    parsed, failures = parsed_by_fairseq(commands)
    assert failures == []
    assert len(parsed) == sum(len(r.models) for r in RECIPES)
    assert any(args.arch == "relu_former_iwslt_de_en"
               and args.criterion.startswith("regularized_label_smoothed") for args in parsed)
    assert any(args.arch == "deep_pyramidion" and args.criterion.startswith("label_smoothed")
               for args in parsed)
    assert all(args.max_update in (100000, 300000, 20000) for args in parsed)


def test_shared_helpers_are_not_copied():
    """Data-set scripts source the one library; none defines its own step machinery; the
    text generation data sets share their train.sh and evaluate.sh."""
    assert len(ALL_SCRIPTS) == 18  # prepare, train, evaluate for 6 folders
    for path in ALL_SCRIPTS:
        text = path.read_text()
        assert 'source "$(dirname "$0")/../lib/recipe.sh"' in text, path
        assert "recipe_step()" not in text and "fairseq_cli fairseq-preprocess" not in text, path
    for kind in ("train", "evaluate"):
        for folder in ("gigaword_10k", "squad_qg"):
            text = (SCRIPTS / folder / f"{kind}.sh").read_text()
            assert f"text_generation_{kind}_main" in text and "TRAIN_ARGS" not in text
    assert shutil.which("bash")


# ---------------------------------------------------------------------------- helpers
def test_clean_parallel_keeps_what_clean_corpus_n_keeps():
    from scripts.recipes.lib.prepare_text import clean_parallel

    src = ["a b c", "a b c", "", "a " * 176, "a b"]
    tgt = ["x y", "x", "x", "x", "x y z"]
    # 3/2 = 1.5 is kept (not > ratio), 3/1 is not; empty and over-long sides go
    assert clean_parallel(src, tgt, ratio=1.5, max_len=175) == (["a b c", "a b"],
                                                                ["x y", "x y z"])
    with pytest.raises(ValueError, match="differ in length"):
        clean_parallel(["a"], [])


def test_split_every_matches_fairseqs_awk_rule():
    from scripts.recipes.lib.prepare_text import split_every

    lines = [str(i) for i in range(1, 47)]  # awk's NR
    kept, taken = split_every(lines, 23, offset=22)
    assert taken == ["23", "46"] and len(kept) == 44


def test_pack_documents_keeps_pairs_whole_and_counts_as_g_transformer():
    from scripts.recipes.lib.prepare_text import oversized_pairs, pack_documents, pair_length

    assert pair_length("a b c", "d") == 5  # longer side + <s> and </s>
    docs = [[("a b", "c d"), ("e f g", "h"), ("i", "j k")], [("x", "y")],
            [("1 2 3 4 5 6 7 8 9", "7"), ("z", "w"), ("", "")]]
    # limit 9: 4 + 5 = 9 is not below it, 5 + 4 = 9 neither; the 9-word pair (11) alone
    assert pack_documents(docs, 9) == [("a b", "c d"), ("e f g", "h"), ("i", "j k"),
                                       ("x", "y"), ("1 2 3 4 5 6 7 8 9", "7"), ("z", "w")]
    # limit 10: 4 + 5 = 9 is below it, 9 + 4 is not
    assert pack_documents(docs, 10) == [("a b e f g", "c d h"), ("i", "j k"), ("x", "y"),
                                        ("1 2 3 4 5 6 7 8 9", "7"), ("z", "w")]
    assert oversized_pairs(docs, 10) == 1 and oversized_pairs(docs, 12) == 0


def test_moses_sentence_splitter():
    from scripts.recipes.lib.sentence_split import split_sentences

    text = ('Mr. Smith came. He said: "Hello!" Then he left... The U.S.A. is big. See No. 5 '
            "and Art. 3. It was 3 p.m. Yes?")
    assert split_sentences(text) == ["Mr. Smith came.", 'He said: "Hello!"', "Then he left...",
                                     "The U.S.A. is big.", "See No. 5 and Art. 3.",
                                     "It was 3 p.m.", "Yes?"]
    assert split_sentences("Herr Präsident! Wir kommen z.B. am 1. Mai. Gut.", "de") == [
        "Herr Präsident!", "Wir kommen z.B. am 1. Mai.", "Gut."]
    assert split_sentences("we show e.g. that it works. the end .", cased=False) == [
        "we show e.g. that it works.", "the end ."]
    assert split_sentences("  ") == []


def test_europarl_raw_format_reader(tmp_path: Path):
    from scripts.recipes.lib.corpus_formats import europarl_chapters, europarl_documents

    lines = ["<CHAPTER ID=2>", "Title here.", '<SPEAKER ID=1 NAME="A">',
             "First one. Second one! Third?", "<BRK>", "", "</SPEAKER>", "<P>", "Fourth."]
    assert europarl_chapters(lines, "en") == {"2": [
        ("CHAPTER", [["Title here."]]),
        ("SPEAKER", [["First one.", "Second one!", "Third?"]]),
        ("P", [["Fourth."]])]}
    build_europarl(tmp_path)
    import tarfile

    with tarfile.open(tmp_path / "europarl.tgz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    txt = tmp_path / "x" / "txt"
    documents, skipped = europarl_documents(txt / "en", txt / "de", "en", "de")
    assert len(documents) == 18 and skipped == 0  # the German-only session has no partner
    pairs = [pair for _, doc in documents for pair in doc]
    for s, t in pairs:
        assert MARKER.findall(s) == MARKER.findall(t) != []
    fixture = set(MARKER.findall("".join(p.read_text() for p in (txt / "en").glob("*.txt"))))
    assert {m for s, _ in pairs for m in MARKER.findall(s)} == fixture


def test_concatenated_documents_reader():
    from scripts.recipes.lib.corpus_formats import concatenated_documents

    src = ["<d>", "a .", "b .", "<d>", "c ."]
    tgt = ["<d>", "x .", "y .", "<d>", "z ."]
    assert concatenated_documents(src, tgt, "dev") == [("dev#0", [("a .", "x ."), ("b .", "y .")]),
                                                      ("dev#1", [("c .", "z .")])]
    with pytest.raises(ValueError, match="line 2: a document starts on one side only"):
        concatenated_documents(["<d>", "a"], ["<d>", "<d>"], "dev")


def test_helper_errors_are_one_line(tmp_path: Path):
    bad = tmp_path / "train-v1.1.json"
    bad.write_text("{}")
    proc = run_command([sys.executable, "-m", "scripts.recipes.lib.corpus_formats", "squad-qg",
                        "-i", bad, "--out-dir", tmp_path], check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "corpus_formats.py squad-qg: error: missing field 'data'"]


def test_straight_apostrophes_as_fairseq():
    from scripts.recipes.lib.prepare_text import moses_tokenize

    assert moses_tokenize(["It\u2019s here."], "en", straight_apostrophes=True) == \
        moses_tokenize(["It's here."], "en")
    assert moses_tokenize(["It\u2019s here."], "en") != moses_tokenize(["It's here."], "en")


def test_gale_church_aligns_one_to_one_and_merges():
    from scripts.recipes.lib.corpus_formats import gale_church

    src = ["The cat sat on the mat today.", "It was warm.", "Then it left the room quietly."]
    tgt = ["Die Katze sass heute auf der Matte.", "Es war warm.",
           "Dann verliess sie leise das Zimmer."]
    assert gale_church(src, tgt) == list(zip(src, tgt))
    # the German joins the last two English sentences into one
    merged = gale_church(src, [tgt[0], "Es war warm, dann verliess sie leise das Zimmer."])
    assert merged == [(src[0], tgt[0]),
                      (f"{src[1]} {src[2]}", "Es war warm, dann verliess sie leise das Zimmer.")]


def test_format_readers():
    from scripts.recipes.lib.corpus_formats import cohan_pairs, iwslt_train_lines, xml_segments

    assert iwslt_train_lines(["<url>http://x</url>", "<talkid>3</talkid>", "<title>T i</title>",
                              "  Hello world.  ", "<description>D</description>"]) == \
        ["T i", "Hello world.", "D"]
    assert xml_segments(['<doc docid="1">', '<seg id="1"> Hi . </seg>', "</doc>",
                         '<seg id="2">Bye</seg>']) == ["Hi .", "Bye"]
    line = json.dumps({"article_text": ["a b .", " c "], "abstract_text": ["<S> x y . </S>",
                                                                         "<S> z </S>"]})
    assert cohan_pairs([line, ""]) == [("a b . c", "x y . z")]


def test_truecaser_restores_the_usual_casing_of_sentence_initial_words(tmp_path: Path):
    """Moses truecasing: casing counted off sentence starts, applied to the first word."""
    from scripts.recipes.lib.truecase import main, train_truecaser, truecase_lines

    train = ["The house of Europe is big .", "we saw the house in Europe .",
             "the end of the house .", "Europe is here ."]
    truecaser = train_truecaser(train)
    assert truecase_lines(["The house is in Europe .", "Europe saw the house .", ""],
                          truecaser) == ["the house is in Europe .", "Europe saw the house .", ""]
    (tmp_path / "train.en").write_text("\n".join(train) + "\n")
    main(["--train", str(tmp_path / "train.en"), "--model", str(tmp_path / "model.en"),
          "--inputs", str(tmp_path / "train.en"), "--outputs", str(tmp_path / "out.en")])
    assert read_lines(tmp_path / "out.en")[0] == "the house of Europe is big ."
    assert (tmp_path / "model.en").is_file() and not list(tmp_path.glob("*.tmp.*"))


def test_squad_truncation_keeps_the_chunk_holding_the_answer(tmp_path: Path):
    """The paper's 464-token input: the chunk with the answer, never a tail cut that loses it."""
    from scripts.recipes.lib.answer_window import answer_chunk, locate_answer
    from scripts.recipes.lib.corpus_formats import squad_qg_pairs

    path = tmp_path / "long.json"
    path.write_text(json.dumps({"version": "1.1", "data": [
        {"title": "t", "paragraphs": [long_squad_paragraph()]}]}))
    (_, source, question), = squad_qg_pairs(path)
    answer, passage = source.split(" <sep> ")
    words = passage.split()
    assert answer == LONG_ANSWER and len(words) == 464
    # the second chunk of 464 (tokens 464..599, moved back to hold 464 tokens): the answer
    # keeps its place among the tokens around it
    assert words.index(LONG_ANSWER) == LONG_ANSWER_AT - (600 - 464)
    assert words[0] == f"filler{(600 - 464) % 50}"
    (_, whole, _), = squad_qg_pairs(path, max_passage_tokens=0)
    assert len(whole.split(" <sep> ")[1].split()) == 600
    # the chunk rule itself: fixed chunks from the start, moved back when the answer crosses
    assert answer_chunk(1000, 10, 12, 464) == (0, 464)
    assert answer_chunk(1000, 470, 472, 464) == (464, 928)
    assert answer_chunk(1000, 460, 470, 464) == (6, 470)
    assert answer_chunk(1000, 950, 951, 464) == (536, 1000)
    assert answer_chunk(100, 90, 91, 464) == (0, 100)
    for length, start, size in ((1000, 463, 464), (2000, 1500, 100), (50, 49, 8)):
        lo, hi = answer_chunk(length, start, start + 3, size)
        assert hi - lo == size and lo <= start and min(start + 3, length) <= hi
    # the answer's tokens are found nearest the prefix's token count
    assert locate_answer("a b c a b".split(), ["a", "b"], 3) == 3
    assert locate_answer("a b c".split(), ["zz"], 2) == 2


def test_multi_reference_bleu_groups_questions_of_one_input(tmp_path: Path):
    from scripts.recipes.lib.score import bleu_scores, score

    log = ["S-0\tans <sep> para", "T-0\twhat is it ?", "H-0\t-1\twho is it ?",
           "S-1\tans <sep> para", "T-1\twho is it ?", "H-1\t-1\twho is it ?",
           "S-2\tother <sep> para", "T-2\twhere was it ?", "H-2\t-1\twhere was it ?"]
    path = tmp_path / "gen.txt"
    path.write_text("\n".join(log) + "\n")
    grouped = score(path, "bleu", bleu_orders=(4,), multi_reference=True)
    # input 0/1 has the references "what is it ?" and "who is it ?": its hypothesis matches one
    assert grouped["distinct_sources"] == 2 and grouped["bleu4_tokenized"] == 100.0
    assert score(path, "bleu")["bleu4_tokenized"] < 100.0
    assert bleu_scores(["a b c d"], [["x", "a b c d"]])["bleu4_tokenized"] == 100.0


def test_scoring_fewer_hypotheses_than_references_is_refused_in_one_line(tmp_path: Path):
    """fairseq-score scores 50 system lines against 200 references without a word; the
    recipes' scorer refuses, in one line naming both files, and writes no result."""
    log = [line for i in range(50) for line in (f"T-{i}\tw{i} x", f"H-{i}\t-0.5\tw{i} x")]
    generated, references = tmp_path / "generate-test.txt", tmp_path / "test.ref"
    generated.write_text("\n".join(log) + "\n")
    references.write_text("".join(f"w{i} x\n" for i in range(200)))
    out = tmp_path / "score-test.json"
    proc = run_command([sys.executable, "-m", "scripts.recipes.lib.score", generated,
                        "--metric", "bleu", "--references", references, "--out", out],
                       cwd=REPO_ROOT, check=False)
    assert proc.returncode == 1 and not out.exists()
    assert proc.stderr.splitlines() == [
        f"python -m scripts.recipes.lib.score: error: the generate log {generated} has 50 "
        f"hypotheses but {references} has 200 references: sentences were skipped, or the "
        "references are of another set"]


def test_rouge_scores_with_lsum():
    from scripts.recipes.lib.score import rouge_scores

    hyp, ref = "the cat sat on the mat. a dog ran off.", "a dog ran off. the cat sat on the mat."
    result = rouge_scores([hyp], [ref], lsum=True)
    # one sequence: the longest common subsequence is one sentence; sentence by sentence,
    # both sentences are matched
    assert result["rougeLsum"] == 100.0 and result["rougeL"] < 100.0
    assert result["rouge1"] == 100.0 and set(result) == {"rouge1", "rouge2", "rougeL",
                                                          "rougeLsum"}
    assert set(rouge_scores([hyp], [ref])) == {"rouge1", "rouge2", "rougeL"}
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        rouge_scores([hyp], [ref, ref])


def test_scores_of_a_generate_log(tmp_path: Path):
    from scripts.recipes.lib.score import parse_generate, score, split_compounds

    log = ["S-1\tsrc", "T-1\tthe cat sat", "H-1\t-0.5\tthe cat sat", "H-1\t-0.9\tnot best",
           "T-0\ta dog-like dog", "H-0\t-0.1\ta dog-like dog", "P-0\t-0.1 -0.2",
           "Generate test with beam=5: BLEU4 = 100.00, 100.0/100.0/100.0/100.0"]
    ids, hyps, refs = parse_generate(log)
    assert ids == [0, 1] and hyps == ["a dog-like dog", "the cat sat"] and refs == hyps
    assert split_compounds("a dog-like dog") == "a dog ##AT##-##AT## like dog"
    path = tmp_path / "gen.txt"
    path.write_text("\n".join(log) + "\n")
    result = score(path, "bleu", bleu_orders=(1, 4), compounds=True)
    assert result["bleu1_tokenized"] == result["bleu4_tokenized"] == 100.0
    assert result["fairseq_generate_bleu4"] == 100.0
    assert score(path, "rouge")["rouge2"] == 100.0
    refs_file = tmp_path / "refs.txt"
    refs_file.write_text("a dog-like dog\n")
    with pytest.raises(ValueError, match="sentence id 1"):
        score(path, "bleu", references=refs_file)
    with pytest.raises(ValueError, match="2 hypotheses, the subset 3"):
        score(path, "bleu", expected_sentences=3)
