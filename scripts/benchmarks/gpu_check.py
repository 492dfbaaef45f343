"""Everything that needs a GPU, in one go (about 6 minutes on an H200), into one Markdown report.

Measured on an H200 (2026-12-04): the tests 52 s, the benchmark 124 s (head size 64) and
103 s (128) at --rounds 3; the training part did not finish in the 140 s it was given there.

0. The first-use check ``--attention-backend auto`` runs before it trusts a compiled GPU
   kernel (``relu_former/relu_attention/kernels/first_use_check.py``): Triton and
   FlexAttention against float64, forward and backward, with and without dropout's replay, in
   float32, float16 and bfloat16 at each --head-dims; and ``python -m relu_former.help
   --backends``, which says what auto picks on this GPU.
1. The kernels' correctness tests on CUDA: the Triton kernel, the FlexAttention path and the
   tiled kernel, each against float64 (pytest on their test files).
2. A ``fairseq-train --fp16`` of --updates updates (100) of ``relu_former_iwslt_de_en`` (the
   default kernel choice: Triton on CUDA) and of fairseq's ``transformer_iwslt_de_en`` on a
   synthetic corpus it writes and binarises, comparing words/s (fairseq's ``wps``).
3. ``bench_attention_gpu`` at n = 1k..16k in bf16, head sizes 64 and 128: Triton with and
   without the statistics and dropout, FlexAttention and tiled, against SDPA (flash); time
   and peak memory.

It stops at once, with a one-line error, where there is no CUDA device. Each part's output
goes to --out; the report is --out/gpu_check.md, rewritten (under a temporary name, then
renamed) after each part, so a run stopped by an outer time limit keeps what it measured;
each part's end is printed as it comes.

    python -m scripts.benchmarks.gpu_check --out bench/gpu_check
    python -m scripts.benchmarks.gpu_check --quick --out bench/gpu_check   # ~2 minutes
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_FILES = ("tests/relu_attention/kernels/test_triton_kernel.py",
              "tests/relu_attention/kernels/test_flex.py",
              "tests/relu_attention/kernels/test_tiled.py")
ARCHS = ("relu_former_iwslt_de_en", "transformer_iwslt_de_en")
FULL_LENGTHS = (1024, 2048, 4096, 8192, 16384)
QUICK_LENGTHS = (1024, 2048)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench/gpu_check"),
                        help="folder for the report gpu_check.md and each part's output "
                        "(default bench/gpu_check)")
    parser.add_argument("--quick", action="store_true",
                        help=f"lengths {QUICK_LENGTHS}, 3 rounds, 30 updates")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help=f"benchmark lengths (default {FULL_LENGTHS})")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128],
                        help="head sizes to benchmark (default 64 128)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed rounds per case (default 5, --quick 3)")
    parser.add_argument("--updates", type=int, default=None,
                        help="fairseq-train updates per model (default 100, --quick 30)")
    parser.add_argument("--skip", nargs="+", choices=("check", "tests", "bench", "train"),
                        default=[],
                        help="parts to leave out")
    args = parser.parse_args(argv)
    if args.lengths is None:
        args.lengths = list(QUICK_LENGTHS if args.quick else FULL_LENGTHS)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    if args.updates is None:
        args.updates = 30 if args.quick else 100
    if min(args.lengths + args.head_dims + [args.rounds, args.updates]) < 1:
        parser.error("--lengths, --head-dims, --rounds and --updates must be positive")
    return args


def require_cuda() -> str:
    """The device's name, or SystemExit with a one-line reason (no CUDA device, no triton)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
                         "run it on a machine with a GPU and torch's CUDA build")
    from relu_former.relu_attention.kernels.triton_kernel import triton_available

    if not triton_available():
        raise SystemExit("gpu_check: triton is not importable; torch's CUDA wheels ship it "
                         "(pip install triton at the version constraints.txt pins)")
    return torch.cuda.get_device_name()


def first_use_section(head_dims: Sequence[int], device: str = "cuda") -> tuple[str, bool]:
    """The first-use check of each compiled GPU backend per dtype and head size on the
    device, and the backends report, as Markdown; and whether every check passed."""
    import torch

    from relu_former.relu_attention.kernels.backend_report import backends_report
    from relu_former.relu_attention.kernels.dispatch import BACKENDS, NO_DROPOUT
    from relu_former.relu_attention.kernels.first_use_check import first_use_problem

    rows, passed = ["| backend | dtype | head size | result |", "|---|---|---|---|"], True
    for name in ("triton", "flex"):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for head_dim in head_dims:
                q = torch.zeros(1, 1, 1, head_dim, device=device, dtype=dtype)
                start = time.perf_counter()
                problem = first_use_problem(name, BACKENDS[name], q, name not in NO_DROPOUT)
                passed &= not problem
                rows.append(f"| {name} | {str(dtype)[6:]} | {head_dim} | "
                            f"{problem or 'passed'} ({time.perf_counter() - start:.1f} s) |")
    print(f"gpu_check: first-use check: {'passed' if passed else 'FAILED'}", flush=True)
    report = backends_report()
    return "\n".join([*rows, "", "`python -m relu_former.help --backends`:", "", "```",
                      report, "```"]), passed


def run(command: Sequence[str], log_path: Path, env: dict | None = None,
        timeout: float = 600) -> tuple[int, str, float]:
    """(exit code, combined output, seconds); the output is also written to log_path."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(list(command), cwd=REPO_ROOT, capture_output=True, text=True,
                              env={**os.environ, **(env or {})}, timeout=timeout)
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as error:
        code, output = 124, f"timed out after {timeout:.0f} s\n{error.stdout or ''}"
    log_path.write_text(output)
    seconds = time.perf_counter() - start
    # progress: a run cut short by an outer time limit still shows where its time went
    print(f"gpu_check: {log_path.name}: exit {code} after {seconds:.0f} s", flush=True)
    return code, output, seconds


def pytest_summary(output: str) -> str:
    """pytest's closing line (e.g. '12 passed, 1 skipped in 3.2s'), or a note that none came."""
    for line in reversed(output.strip().splitlines()):
        if re.search(r"\d+ (passed|failed|error)", line):
            return line.strip("= ").strip()
    return "no pytest summary (see the log)"


def write_corpus(folder: Path, sentences: int = 20000, vocab: int = 800,
                 seed: int = 0) -> Path:
    """Random parallel text (train/valid/test, de-en): the target is a fixed word mapping of
    the source, so the models have something learnable; lengths 10-40 words."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(vocab)]
    mapping = {w: words[(i * 7 + 3) % vocab] for i, w in enumerate(words)}
    for split, count in (("train", sentences), ("valid", 200), ("test", 200)):
        src, tgt = [], []
        for _ in range(count):
            line = [rng.choice(words) for _ in range(rng.randint(10, 40))]
            src.append(" ".join(line))
            tgt.append(" ".join(mapping[w] for w in line))
        (folder / f"{split}.de").write_text("\n".join(src) + "\n")
        (folder / f"{split}.en").write_text("\n".join(tgt) + "\n")
    return folder


def words_per_second(log_text: str) -> float | None:
    """The last ``wps`` fairseq-train logged (train_inner or epoch line), or None."""
    found = re.findall(r"\bwps[=\s|:]+([0-9.]+)", log_text)
    return float(found[-1]) if found else None


def train_command(data_bin: Path, arch: str, save_dir: Path, updates: int) -> list[str]:
    command = [
        "fairseq-train", str(data_bin), "--user-dir", str(REPO_ROOT / "relu_former"),
        "--arch", arch, "--task", "translation", "--optimizer", "adam",
        "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "50", "--max-tokens", "4096", "--max-update", str(updates),
        "--dropout", "0.3", "--attention-dropout", "0.1", "--share-decoder-input-output-embed",
        # fp16: fairseq 0.12 turns --bf16 into --tpu and then asks torch_xla for the device
        "--fp16", "--log-format", "simple", "--log-interval", "10", "--no-save",
        "--disable-validation", "--save-dir", str(save_dir), "--seed", "1",
    ]
    if arch.startswith("relu_former"):
        command += ["--criterion", "regularized_label_smoothed_cross_entropy",
                    "--label-smoothing", "0.1"]
    else:
        command += ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
    return command


def write_report(path: Path, device: str, sections: Sequence[tuple[str, str]]) -> Path:
    """One Markdown file from (title, body) sections, written atomically."""
    lines = [f"# gpu_check on {device}\n",
             f"{time.strftime('%Y-%m-%d %H:%M')}; `python -m scripts.benchmarks.gpu_check`\n"]
    for title, body in sections:
        lines += [f"## {title}\n", body.rstrip() + "\n"]
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("\n".join(lines))
    temporary.replace(path)
    return path


def training_section(results: dict[str, float | None], updates: int) -> str:
    rows = [f"| {arch} | {'-' if wps is None else f'{wps:.0f}'} |"
            for arch, wps in results.items()]
    relu, stock = (results.get(a) for a in ARCHS)
    ratio = "not measured" if not relu or not stock else f"{relu / stock:.3f}"
    return "\n".join([f"fairseq-train, {updates} updates, fp16, --max-tokens 4096, synthetic "
                      "data; words/s = fairseq's last logged wps\n",
                      "| arch | words/s |", "|---|---|", *rows, "",
                      f"relu_former / transformer words/s: {ratio}"])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = require_cuda()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    sections: list[tuple[str, str]] = []
    failed = False
    if "check" not in args.skip:
        body, passed = first_use_section(args.head_dims)
        failed |= not passed
        sections.append(("First-use check (float64 references)", body))
        write_report(out / "gpu_check.md", device, sections)
    if "tests" not in args.skip:
        code, output, seconds = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                     *TEST_FILES], out / "tests.log")
        failed |= code != 0
        sections.append(("Correctness on CUDA (float64 references)",
                         f"`pytest {' '.join(TEST_FILES)}`: **{pytest_summary(output)}** "
                         f"(exit {code}, {seconds:.0f} s; log tests.log)"))
        write_report(out / "gpu_check.md", device, sections)
    if "train" not in args.skip:
        corpus = write_corpus(out / "corpus")
        data_bin = out / "data-bin"
        code, _, _ = run(["fairseq-preprocess", "--source-lang", "de", "--target-lang", "en",
                          "--trainpref", str(corpus / "train"), "--validpref",
                          str(corpus / "valid"), "--testpref", str(corpus / "test"),
                          "--destdir", str(data_bin), "--joined-dictionary", "--workers", "4"],
                         out / "preprocess.log")
        results: dict[str, float | None] = {}
        for arch in ARCHS:
            code, output, _ = run(train_command(data_bin, arch, out / f"ckpt_{arch}",
                                                args.updates), out / f"train_{arch}.log")
            failed |= code != 0
            results[arch] = words_per_second(output) if code == 0 else None
        sections.append(("Training words/s", training_section(results, args.updates)))
        write_report(out / "gpu_check.md", device, sections)
    if "bench" not in args.skip:
        for head_dim in args.head_dims:
            folder = out / f"bench_d{head_dim}"
            code, output, seconds = run(
                [python, "-m", "scripts.benchmarks.bench_attention_gpu", "--out", str(folder),
                 "--head-dim", str(head_dim), "--heads", str(512 // head_dim), "--batch", "4",
                 "--rounds", str(args.rounds), "--lengths", *map(str, args.lengths)],
                out / f"bench_d{head_dim}.log")
            failed |= code != 0
            report = folder / "bench_attention_gpu.md"
            body = report.read_text() if report.exists() else f"failed (exit {code})"
            # its title becomes a subsection here
            body = re.sub(r"^# ", "### ", body, count=1)
            sections.append((f"Attention kernels, head size {head_dim} ({seconds:.0f} s)", body))
            write_report(out / "gpu_check.md", device, sections)
    path = write_report(out / "gpu_check.md", device, sections)
    print(path.read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
