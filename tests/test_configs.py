"""The YAML configs in configs/: each starts fairseq-hydra-train for one update, and each
agrees with the defaults of the recipe it names in its ``# recipe:`` line."""

from __future__ import annotations

import json
import re
import shlex
from argparse import Namespace
from pathlib import Path

import pytest
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

from helpers import REPO_ROOT, run_command, tiny_hydra_train

CONFIGS = sorted((REPO_ROOT / "configs").glob("*.yaml"))
POOLING_ARCHS = ("pyramidion_base", "transpooler_base", "transpooler_4x", "deep_pyramidion")


def recipe_line(config: Path) -> tuple[dict, Path, str]:
    """The ``# recipe: [VAR=value ...] scripts/x/train.sh MODEL`` line of a config."""
    match = re.search(r"^# recipe: (.+)$", config.read_text(), flags=re.M)
    assert match, f"{config.name} has no '# recipe:' line"
    words = shlex.split(match.group(1))
    env = dict(w.split("=", 1) for w in words[:-2])
    return env, REPO_ROOT / words[-2], words[-1]


def model_name(config: Path) -> str:
    return re.search(r"^model:\n  _name: (\S+)$", config.read_text(), flags=re.M).group(1)


def test_there_is_a_config_per_paper_setting():
    names = {c.stem for c in CONFIGS}
    assert {"iwslt14_de_en_transformer", "iwslt14_de_en_relu_former", "wmt14_en_de_relu_former",
            "europarl7_doc_relu_former", "arxiv_deep_pyramidion", "pubmed_deep_pyramidion",
            "gigaword_10k_sparse_softmax", "squad_qg_sparse_softmax"} <= names


@pytest.fixture(scope="module")
def hydra_runs(toy_data_bin: Path, made_once) -> dict:
    """Exit status and log (stdout then stderr) of a one-update fairseq-hydra-train run of
    every config, in the test process (``run_command``: fairseq is imported once, not once
    per config), run once whichever worker the tests run on."""

    def make(work: Path) -> None:
        runs = {}
        for config in CONFIGS:
            extra = []
            if model_name(config) in POOLING_ARCHS:
                extra = ["++model.pooling_schedule=last:4"]  # the toy sentences are 3-10 tokens
            proc = tiny_hydra_train(toy_data_bin, work / config.stem, *extra,
                                    config=config.stem)
            runs[config.stem] = (str(proc.returncode), proc.stdout + proc.stderr)
        (work / "runs.json").write_text(json.dumps(runs))

    return json.loads((made_once("hydra_runs", make) / "runs.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_starts_hydra_training(config: Path, hydra_runs: dict):
    assert config.stem in hydra_runs
    status, log = hydra_runs[config.stem]
    assert status == "0", log[-3000:]
    assert "num_updates=1" in log.replace(" ", ""), log[-3000:]
    assert "Stopping training due to num_updates: 1 >= max_update: 1" in log
    # the model of this config was built (fairseq logs the model and its arch)
    assert f"'_name': '{model_name(config)}'" in log, log[-3000:]


SKIP = {"task.data", "common.user_dir"}  # the recipe's are the user's folders


def recipe_differences(argv: list[str], config: Path) -> tuple[list[str], int]:
    """The values ``config`` sets that fairseq-train's ``argv`` sets otherwise (fairseq's own
    parser and its conversion to a config, in this process), and how many were compared."""
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    recipe = convert_namespace_to_omegaconf(args)
    wanted = OmegaConf.to_container(OmegaConf.load(config))
    wanted.pop("hydra", None)
    diffs, checked = [], 0
    for group, values in wanted.items():
        for key, value in values.items():
            if f"{group}.{key}" in SKIP:
                continue
            if key == "_name":
                got = args.arch if group == "model" else getattr(args, group)
            else:
                section = recipe[group]
                got = getattr(section, key) if isinstance(section, Namespace) else section[key]
                if OmegaConf.is_config(got):
                    got = OmegaConf.to_container(got)
            checked += 1
            if got != value:
                diffs.append(f"{group}.{key}: yaml {value!r}, recipe {got!r}")
    return diffs, checked


# what fairseq's conversion to a config says each time (a fairseq-train run prints it)
@pytest.mark.filterwarnings(
    r"ignore:hydra.experimental.initialize\(\) is no longer experimental:UserWarning",
    r"ignore:\s*The version_base parameter is not specified:UserWarning")
def test_configs_match_recipe_defaults():
    """Every value a config sets equals what its recipe's fairseq-train command sets."""
    for config in CONFIGS:
        env, script, model = recipe_line(config)
        proc = run_command([script, "--dry-run", model], env=env)
        diffs, checked = recipe_differences(shlex.split(proc.stdout)[1:], config)
        assert diffs == [], config.stem
        assert checked >= 15, (config.stem, checked)


TRANSLATION = {"iwslt14_de_en": ("transformer", "relu_former", "relu_former_softmax_cross",
                                 "sparsemax", "entmax15", "rela", "sparse_softmax"),
               "wmt14_en_de": ("transformer", "relu_former", "relu_former_softmax_cross",
                               "sparsemax", "entmax15", "rela", "sparse_softmax"),
               "europarl7_doc": ("transformer", "relu_former", "relu_former_softmax_cross",
                                 "sparsemax", "entmax15", "rela")}


def flag_value(words: list[str], flag: str) -> str | None:
    """The value after the last ``flag`` of a command, None when absent."""
    positions = [i for i, w in enumerate(words) if w == flag]
    return words[positions[-1] + 1] if positions else None


@pytest.mark.parametrize("dataset", sorted(TRANSLATION))
def test_translation_presets_use_the_papers_dropout_and_shared_embeddings(dataset: str):
    """ReLUFormer paper, appendix A.2: dropout 0.1 on residual connections and attention
    weights, shared source/target embeddings, for every model of the comparison; the configs
    of these recipes set the same."""
    for model in TRANSLATION[dataset]:
        proc = run_command([REPO_ROOT / "scripts" / "recipes" / dataset / "train.sh",
                            "--dry-run", model])
        words = shlex.split(proc.stdout)
        assert flag_value(words, "--dropout") == "0.1", (dataset, model)
        assert flag_value(words, "--attention-dropout") == "0.1", (dataset, model)
        assert "--share-all-embeddings" in words, (dataset, model)
    configs = [c for c in CONFIGS if c.stem.startswith(dataset)]
    assert configs
    for config in configs:
        text = config.read_text()
        model_section = re.search(r"^model:\n((?:  .*\n)+)", text, flags=re.M).group(1)
        for line in ("  dropout: 0.1\n", "  attention_dropout: 0.1\n",
                     "  share_all_embeddings: true\n"):
            assert line in model_section, (config.name, line)
