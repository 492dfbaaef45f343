"""The docs describe the models the recipes train: docs/recipes.md's "What each train.sh
trains" table against the scripts' own dry runs, parsed by fairseq.

Each row names a ``train.sh`` command, the activation of each attention (encoder
self-attention / decoder self-attention / cross-attention) and flags with their values. The
test runs every command with ``--dry-run``, checks that each flag is there with that value
(the last occurrence, as argparse reads it), parses the command with fairseq's own training
parser (which applies the architecture's defaults) and reads the three activations from it.
The demo's ReLUFormer run must get the same activations as the recipes' ``relu_former``.
Phrases that described the old hybrid default must not come back into the docs.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from helpers import REPO_ROOT, run_command

RECIPES_DOC = REPO_ROOT / "docs" / "recipes.md"
SCRIPTS = REPO_ROOT / "scripts" / "recipes"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|\s*(.+?)\s*\|\s*$")


def claim_rows() -> list[tuple[str, list[str], list[str]]]:
    """(command, [encoder, decoder, cross] activations, [flag spans]) of every table row."""
    text = RECIPES_DOC.read_text()
    table = text.split("<!-- BEGIN dry-run claims -->")[1].split("<!-- END dry-run claims -->")[0]
    rows = []
    for line in table.splitlines():
        match = ROW.match(line)
        if not match or match.group(1) == "command":
            continue
        command, attentions, flags = match.groups()
        rows.append((command, [a.strip() for a in attentions.split("/")],
                     re.findall(r"`([^`]+)`", flags)))
    return rows


ROWS = claim_rows()


def dry_run(command: str, tmp_path: Path) -> list[str]:
    """The fairseq-train argv that ``[VAR=VALUE ...] <dataset>/train.sh MODEL`` prints."""
    words = shlex.split(command)
    env = {"DATA_ROOT": str(tmp_path / "data"), "CHECKPOINT_ROOT": str(tmp_path / "ckpt"),
           "PYTHON": sys.executable}
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    script, model = words
    proc = run_command([SCRIPTS / script, "--dry-run", model], env=env)
    argv = shlex.split(proc.stdout)
    assert Path(argv[0]).name == "fairseq-train", proc.stdout
    return argv[1:]


def flag_value(words: list[str], flag: str) -> str | None:
    positions = [i for i, w in enumerate(words) if w == flag]
    if not positions:
        return None
    nxt = positions[-1] + 1
    return words[nxt] if nxt < len(words) and not words[nxt].startswith("--") else ""


def parsed_activations(argvs: list[list[str]]) -> list[list[str]]:
    """Each training command's (encoder, decoder, cross) attention activation as fairseq's
    parser fills in the architecture's defaults (in this process, as fairseq-train parses its
    command line; 4 s of imports less than a new interpreter): an attention's activation is its
    own flag, else --attention-activation, else softmax (fairseq's stock attention)."""
    from fairseq import options

    import relu_former.plugin  # noqa: F401  (registers the archs)

    activations = []
    for argv in argvs:
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        shared = getattr(args, "attention_activation", None) or "softmax"
        activations.append([getattr(args, f"{kind}_attention_activation", None) or shared
                            for kind in ("encoder", "decoder", "cross")])
    return activations


def test_the_table_covers_every_recipe_and_the_claims_that_matter():
    commands = [command for command, _, _ in ROWS]
    for folder in ("iwslt14_de_en", "wmt14_en_de", "europarl7_doc", "long_doc_summarization",
                   "gigaword_10k", "squad_qg"):
        assert any(f"{folder}/train.sh" in c for c in commands), folder
    flags = {span.split()[0] for _, _, spans in ROWS for span in spans}
    # activations, batch, updates, sharing: named in the table for the recipes
    for flag in ("--attention-activation", "--cross-attention-activation", "--max-tokens",
                 "--update-freq", "--batch-size", "--max-update", "--share-all-embeddings"):
        assert flag in flags, flag


def test_every_claimed_flag_and_activation_is_what_the_script_trains(tmp_path: Path):
    argvs = []
    for command, _, spans in ROWS:
        words = dry_run(command, tmp_path)
        for span in spans:
            flag, _, value = span.partition(" ")
            got = flag_value(words, flag)
            assert got is not None, (command, flag, "not passed")
            assert got == value, (command, flag, f"docs {value!r}, script {got!r}")
        argvs.append(words)
    for (command, claimed, _), got in zip(ROWS, parsed_activations(argvs)):
        assert got == claimed, (command, f"docs {claimed}, trained {got}")


def test_relu_former_is_the_full_relu_model_in_recipes_and_demo(tmp_path: Path):
    """The paper's full-ReLU model under its name, in every translation recipe and the demo."""
    from scripts.demo.demo import translation_runs

    argvs = [dry_run(f"{folder}/train.sh relu_former", tmp_path)
             for folder in ("iwslt14_de_en", "wmt14_en_de", "europarl7_doc")]
    names = {"arch": {"relu_former_iwslt_de_en"},
             "criterion": {"regularized_label_smoothed_cross_entropy"}, "task": set()}
    demo = {run.key: run for run in translation_runs(None, names, None, say=lambda _: None)}
    relu = demo["relu"]
    argvs.append(["data", "--task", "translation", "--arch", relu.arch, *relu.train_flags])
    hybrid = dry_run("iwslt14_de_en/train.sh relu_former_softmax_cross", tmp_path)
    argvs.append(hybrid)
    *full, demo_relu, hybrid_got = parsed_activations(argvs)
    assert full == [["relu", "relu", "relu"]] * 3
    assert demo_relu == ["relu", "relu", "relu"], relu.train_flags
    assert hybrid_got == ["relu", "relu", "softmax"]


STALE = [
    r"softmax cross-attention by default",
    r"use ReLU self-attention and softmax cross-attention",
    r"archs' default\); `-- --attention-activation relu`",
    r"ReLU self-attention, softmax cross-attention \(the `relu_former_\*` archs' default\)",
    r"default to ReLU self-attention and softmax cross-attention",
    r"train\.10k\.src",
    r"batch size not stated \| `--max-tokens 16384`",
]


@pytest.mark.parametrize("pattern", STALE)
def test_docs_no_longer_describe_what_the_code_does_not_train(pattern: str):
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    hits = [p.name for p in pages if re.search(pattern, p.read_text())]
    assert not hits, (pattern, hits)
