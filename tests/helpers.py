"""Test helpers: a tiny parallel corpus in fairseq's formats and a driver for its CLI.

The end-to-end tests run the real ``fairseq-preprocess``, ``fairseq-train`` and
``fairseq-generate`` console scripts with a user's command lines, the plugin loaded by
``--user-dir``; they run inside the test process, as fairseq's own tests call its ``main()``
(``fairseq_in_process.py`` says what that changes, and ``fresh=True`` asks for a new
interpreter). Everything is generated here; nothing is downloaded.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

# Imported with the conftest, before any test's code runs: it notes the loggers' state that
# fairseq's imports leave, which each command starts with.
from fairseq_in_process import run_in_process, runs_in_process

from scripts.analysis.toy_corpus import write_toy_parallel_corpus  # noqa: F401

# The tests import these two from here, with the rest of their helpers.
from scripts.common.fairseq_cli import fairseq_command  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO_ROOT / "relu_former")

# A 1-layer model of width 16 trains a few updates in seconds on one CPU core.
TINY_MODEL_ARGS = [
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
    "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]  # fmt: skip

TINY_TRAIN_ARGS = [
    "--cpu", "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "400",
    "--max-update", "6", "--log-format", "simple", "--log-interval", "1",
    "--no-progress-bar", "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "1",
    "--validate-interval-updates", "6", "--save-interval-updates", "6",
]  # fmt: skip


# fairseq-hydra-train overrides for the toy corpus (its languages): the tiny model, one update
HYDRA_TINY_OVERRIDES = [
    "++common.cpu=true", "++common.log_format=simple", "++common.log_interval=1",
    "++optimization.max_update=1", "++optimization.update_freq=[1]",
    "++dataset.max_tokens=400", "++dataset.num_workers=0",
    "++dataset.disable_validation=true", "++checkpoint.no_save=true",
    "task.source_lang=de", "task.target_lang=en",
    "++model.encoder_layers=2", "++model.decoder_layers=1",
    "++model.encoder_embed_dim=16", "++model.decoder_embed_dim=16",
    "++model.encoder_ffn_embed_dim=32", "++model.decoder_ffn_embed_dim=32",
    "++model.encoder_attention_heads=2", "++model.decoder_attention_heads=2",
]  # fmt: skip


def tiny_hydra_train(data_bin: Path, save_dir: Path, *overrides: str,
                     config: str = "iwslt14_de_en_relu_former") -> subprocess.CompletedProcess:
    """``fairseq-hydra-train`` with a config of ``configs/`` on the toy corpus, the tiny model
    and ``overrides``, run in ``save_dir``'s parent; not checked."""
    return run_command([
        fairseq_command("fairseq-hydra-train"), "--config-dir", REPO_ROOT / "configs",
        "--config-name", config, f"task.data={data_bin}", f"common.user_dir={USER_DIR}",
        f"++checkpoint.save_dir={save_dir}", *HYDRA_TINY_OVERRIDES, *overrides,
    ], check=False, cwd=save_dir.parent)


def run_command(args: Sequence[str], cwd: Path | None = None, check: bool = True,
                env: dict | None = None, timeout: int = 600, input: str | None = None,
                fresh: bool = False) -> subprocess.CompletedProcess:
    """Run a command (``input`` on its stdin), capture its output and, with ``check``, fail
    the test with its log. A fairseq console script runs in this process
    (``fairseq_in_process``) unless ``fresh`` (a new interpreter) is asked for or ``env`` sets
    a variable read at start-up; ``timeout`` (seconds) applies to a command run as a process
    only: a call in this process cannot be killed."""
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    # ``python -m scripts.<kind>.<name>`` works from any folder, as it does from the root.
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), full_env.get("PYTHONPATH", "")) if p)
    if env:
        full_env.update(env)
    args = [str(a) for a in args]
    if not fresh and runs_in_process(args, env):
        proc = run_in_process(args, cwd, full_env, input)
    else:
        proc = subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True,
                              timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(args)}\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def install_without_compiler(folder: Path) -> Path:
    """``pip install --target folder/site`` of a copy of the checkout (pip builds in the tree
    it is given) with CC=false CXX=false: a non-editable install whose kernel is not built,
    its note saying why (and no ~40 s compile). Returns the site folder."""
    source, site = folder / "source", folder / "site"
    source.mkdir()
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(REPO_ROOT / name, source)
    for name in ("relu_former", "criterions"):
        shutil.copytree(REPO_ROOT / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "_relu_attention_cpu*"))
    run_command([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                 "--disable-pip-version-check", "-q", "--target", site, source],
                env={"CC": "false", "CXX": "false", "PIP_NO_INDEX": "1"}, fresh=True)
    return site


@dataclass
class FairseqRun:
    """Drives the fairseq command line on one binarized data folder.

    Every call returns the completed process; ``train`` and ``generate`` check that the
    files they are meant to write (checkpoint, hypotheses, BLEU line) are really there.
    """

    data_bin: Path
    work: Path
    user_dir: str = USER_DIR
    log: list = field(default_factory=list)

    def train(self, *extra: str, save_dir: str = "checkpoints", arch: str = "transformer",
              tiny_model: bool = True, check: bool = True) -> subprocess.CompletedProcess:
        save = self.work / save_dir
        args = [
            fairseq_command("fairseq-train"), self.data_bin, "--user-dir", self.user_dir,
            "--arch", arch, "--save-dir", save, *TINY_TRAIN_ARGS,
            *(TINY_MODEL_ARGS if tiny_model else []), *extra,
        ]
        proc = run_command(args, cwd=self.work, check=check)
        self.log.append(proc)
        if check:
            assert (save / "checkpoint_last.pt").is_file(), proc.stdout[-3000:]
        return proc

    def generate(self, *extra: str, save_dir: str = "checkpoints", split: str = "test",
                 check: bool = True) -> subprocess.CompletedProcess:
        args = [
            fairseq_command("fairseq-generate"), self.data_bin, "--user-dir", self.user_dir,
            "--path", self.work / save_dir / "checkpoint_last.pt", "--gen-subset", split,
            "--beam", "2", "--max-tokens", "1000", "--cpu", "--num-workers", "0", *extra,
        ]
        proc = run_command(args, cwd=self.work, check=check)
        self.log.append(proc)
        if check:
            assert_generation_output(proc.stdout)
        return proc


def loaded_updates(log: str) -> int:
    """The update count of the checkpoint fairseq-train says it resumed from."""
    match = re.search(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)", log)
    assert match, log[-3000:]
    return int(match.group(1))


def assert_generation_output(stdout: str) -> dict:
    """Check fairseq-generate printed hypotheses for every sentence and a BLEU line."""
    hypotheses = re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", stdout, flags=re.M)
    assert hypotheses, f"no H- lines in fairseq-generate output:\n{stdout[-3000:]}"
    scores = [float(score) for _, score, _ in hypotheses]
    assert all(s == s for s in scores), "a hypothesis score is NaN"
    match = re.search(r"BLEU4? = ([\d.]+)|BLEU = ([\d.]+)", stdout)
    assert match, f"no BLEU line in fairseq-generate output:\n{stdout[-2000:]}"
    bleu = float(match.group(1) or match.group(2))
    return {"hypotheses": hypotheses, "bleu": bleu}


def preprocess(raw: Path, dest: Path, src: str = "de", tgt: str = "en",
               extra: Sequence[str] = ()) -> Path:
    """Binarize ``raw/{train,valid,test}.{src,tgt}`` with a joined dictionary."""
    run_command([
        fairseq_command("fairseq-preprocess"), "--source-lang", src, "--target-lang", tgt,
        "--trainpref", raw / "train", "--validpref", raw / "valid", "--testpref", raw / "test",
        "--destdir", dest, "--joined-dictionary", "--workers", "1", *extra,
    ])
    assert (dest / f"dict.{src}.txt").is_file()
    return dest


def read_markdown_table(markdown: str, *leading: str) -> list[dict[str, str]]:
    """The body rows, as ``{column: cell}``, of the first Markdown table in ``markdown`` whose
    header starts with the columns ``leading``; columns are then checked by name, not place."""
    lines = markdown.splitlines()
    for start, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        header = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header[: len(leading)] != list(leading):
            continue
        rows = []
        for body in lines[start + 2:]:
            if not body.startswith("|"):
                break
            cells = [cell.strip() for cell in body.strip().strip("|").split("|")]
            assert len(cells) == len(header), f"ragged row {body!r} under {header}"
            rows.append(dict(zip(header, cells)))
        return rows
    raise AssertionError(f"no table whose header starts with {leading}:\n{markdown[:3000]}")


def table_by_label(markdown: str, headers: Sequence[str]) -> dict[str, dict[str, str]]:
    """The first Markdown table in ``markdown`` whose header is exactly ``headers``, as
    first cell -> {column: cell}."""
    rows = read_markdown_table(markdown, *headers)
    for row in rows:
        assert list(row) == list(headers), f"header {list(row)}, expected {list(headers)}"
    return {row[headers[0]]: row for row in rows}


def pooling_inputs(batch: int, length: int, dim: int = 3, seed: int = 0):
    """float64 vectors [batch, length, dim] (normal) and scores [batch, length] (uniform)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, length, dim, generator=gen, dtype=torch.float64)
    scores = torch.rand(batch, length, generator=gen, dtype=torch.float64)
    return values, scores


def separated_scores(batch: int, length: int, seed: int = 0):
    """float64 scores [batch, length], distinct and 0.05 apart, in random order."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ranks = torch.stack([torch.randperm(length, generator=gen) for _ in range(batch)])
    return ranks.to(torch.float64) * 0.05


def as_from_a_terminal() -> None:
    """A child's SIGINT as a shell gives a foreground command (a ``preexec_fn``): default,
    not blocked. A test worker may hand on an ignored or blocked SIGINT (a process inherits
    both), and a Python started with SIGINT ignored never raises KeyboardInterrupt."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
