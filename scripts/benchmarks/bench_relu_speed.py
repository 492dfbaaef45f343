"""ReLU attention against softmax: one attention's forward+backward, and whole training steps.

Two tables, every ratio measured side by side in this run (interleaved rounds, median):

1. Attention. ``relu_attention`` (the paper's ReLU with its variance factor, the default
   ``auto`` backend, no statistics) against torch's ``scaled_dot_product_attention`` (the
   fused softmax kernel fairseq's attention calls), forward + backward, no mask, 4 heads, head
   sizes 16, 32 and 64, n from 32 to 4,096 with about ``--tokens`` query tokens a call
   (batch = tokens / n). Target: ReLU / SDPA time at most 1.05 everywhere. Peak tensor memory
   at the longest n (target at most 1.2x); the compiled kernel's per-thread tile buffers
   (2 x 128 x 512 scores) are not tensors and are not counted.
2. Decoder attentions. The plugin's attention module with ReLU against the same module with
   softmax, at document length (``--decoder-length`` queries, as many keys): causal
   self-attention and cross-attention, forward + backward, with and without a padded batch
   row (a quarter of its keys), and one step of incremental decoding (one query against the
   cached keys). Target: ReLU / softmax time at most 1.05.
3. Training. ``relu_former_iwslt_de_en`` with ``--attention-activation relu`` (ReLU in every
   attention: the paper's model) against the same model with ``--attention-activation
   softmax``, fairseq ``Trainer.train_step`` with label-smoothed cross-entropy, at model
   width 64 and 256 (4 heads, 2+2 layers), on sentence pairs and on 1,024- and 4,096-token
   documents, ``--batch-tokens`` target tokens a step. Target: ReLU / softmax words/s at
   least 0.95.

    python -m scripts.benchmarks.bench_relu_speed --quick            # about a minute
    python -m scripts.benchmarks.bench_relu_speed --out bench/out    # the full tables
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from relu_former.relu_attention.activations import relu_attention
from scripts.benchmarks.bench_relu_former_training import (
    build_trainer,
    synthetic_batch,
    write_dictionaries,
)
from scripts.benchmarks.benchmarking import (
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    log,
    peak_memory_bytes,
    quiet_fairseq,
    torch_setup,
)
from scripts.common.plotting import markdown_table

HEADS = 4
TIME_TARGET = 1.05
MEMORY_TARGET = 1.2
WORDS_TARGET = 0.95
TABLES = ("attention", "decoder", "training")
SIZE = ("--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim {w} --decoder-embed-dim {w} "
        "--encoder-ffn-embed-dim {f} --decoder-ffn-embed-dim {f} "
        "--encoder-attention-heads 4 --decoder-attention-heads 4")


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, "small sizes and few rounds: checks that it runs")
    parser.add_quick_argument("--lengths", [32, 64, 128, 256, 512, 1024, 2048, 4096],
                              [32, 256], "sequence lengths of the attention table",
                              nargs="+", type=int)
    parser.add_quick_argument("--head-dims", [16, 32, 64], [16], "head sizes of the "
                              "attention table", nargs="+", type=int)
    parser.add_quick_argument("--tokens", 8192, 512, "query tokens per attention call "
                              "(batch = tokens / n, at least 1)", type=int)
    parser.add_quick_argument("--widths", [64, 256], [64], "model widths of the training "
                              "table", nargs="+", type=int)
    parser.add_quick_argument("--documents", [1024, 4096], [128], "document lengths of the "
                              "training table (a sentence setting of 32 tokens is always run)",
                              nargs="+", type=int)
    parser.add_quick_argument("--decoder-length", 1024, 128, "queries and keys of the decoder "
                              "attention table", type=int)
    parser.add_quick_argument("--batch-tokens", 8192, 512, "target tokens per training step",
                              type=int)
    parser.add_quick_argument("--rounds", 7, 2, "timed rounds (median)", type=int)
    parser.add_argument("--vocab", type=int, default=4000,
                        help="synthetic vocabulary of the training table (default 4000)")
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=list(TABLES),
                        help="which tables to measure (default all three)")
    parser.add_threads_and_out("write OUT/bench_relu_speed.md",
                               "torch intra-op threads (default 1; the README's figures use 2)")
    return parser.parse_args(argv)


def attention_rows(args: argparse.Namespace) -> list[list]:
    rows = []
    for head_dim in args.head_dims:
        for n in args.lengths:
            batch = max(1, args.tokens // n)
            q, k, v = (torch.randn(batch, HEADS, n, head_dim, requires_grad=True)
                       for _ in range(3))
            grad = torch.randn(batch, HEADS, n, head_dim)

            def relu_step(q=q, k=k, v=v, grad=grad):
                relu_attention(q, k, v).out.backward(grad)

            def sdpa_step(q=q, k=k, v=v, grad=grad):
                F.scaled_dot_product_attention(q, k, v).backward(grad)

            seconds = interleaved_median_seconds({"relu": relu_step, "sdpa": sdpa_step},
                                                 rounds=args.rounds, warmup=1)
            ratio = seconds["relu"] / seconds["sdpa"]
            memory = ""
            if n == max(args.lengths):
                memory = peak_memory_bytes(relu_step) / peak_memory_bytes(sdpa_step)
            rows.append([head_dim, n, batch, seconds["sdpa"] * 1e3, seconds["relu"] * 1e3,
                         ratio, "yes" if ratio <= TIME_TARGET else "NO", memory])
            log(f"attention d={head_dim} n={n}: relu/sdpa {ratio:.2f}")
    return rows


DECODER_WIDTH = 256
INCREMENTAL_STEPS = 20


def decoder_cases(length: int, width: int = DECODER_WIDTH, batch: int = 4) -> dict:
    """name: (module kwargs, call): call(module) is the output to back-propagate, or for the
    incremental step a function that runs one step."""
    x = torch.randn(length, batch, width)
    memory = torch.randn(length, batch, width)
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[0, : length // 4] = True  # a left-padded row, as fairseq pads sources
    future = torch.triu(torch.full((length, length), float("-inf")), 1)

    def self_attention(pad):
        return (dict(self_attention=True),
                lambda m: m(x, x, x, key_padding_mask=pad, attn_mask=future)[0])

    def cross_attention(pad):
        return (dict(encoder_decoder_attention=True),
                lambda m: m(x, memory, memory, key_padding_mask=pad)[0])

    def incremental(m):
        # as fairseq's decoder layer calls its self-attention while generating: no gradient,
        # no weights
        state = {}
        with torch.no_grad():
            m(x[:-1], x[:-1], x[:-1], incremental_state=state, attn_mask=future[:-1, :-1],
              need_weights=False)

        def step():
            # a step takes under a millisecond, where one call's time is mostly the timer's
            # and the scheduler's noise: STEPS of them are timed together
            with torch.no_grad():
                for _ in range(INCREMENTAL_STEPS):
                    m(x[-1:], x[-1:], x[-1:], incremental_state=dict(state),
                      need_weights=False)

        return step

    return {"self, causal": self_attention(None), "self, causal, padded": self_attention(padding),
            "cross": cross_attention(None), "cross, padded": cross_attention(padding),
            "incremental step": (dict(self_attention=True), incremental)}


def decoder_rows(args: argparse.Namespace) -> list[list]:
    from relu_former.relu_attention.attention import ActivationMultiheadAttention

    rows = []
    for name, (kwargs, call) in decoder_cases(args.decoder_length).items():
        steps = {}
        for activation in ("relu", "softmax"):
            torch.manual_seed(0)
            module = ActivationMultiheadAttention(DECODER_WIDTH, HEADS, activation=activation,
                                                  **kwargs)
            if name == "incremental step":
                steps[activation] = call(module.eval())
            else:
                module.train()
                steps[activation] = (lambda m=module, c=call: c(m).sum().backward())
        seconds = interleaved_median_seconds(steps, rounds=args.rounds, warmup=1)
        ratio = seconds["relu"] / seconds["softmax"]
        rows.append([name, seconds["softmax"] * 1e3, seconds["relu"] * 1e3, ratio,
                     "yes" if ratio <= TIME_TARGET else "NO"])
        log(f"decoder {name}: relu/softmax {ratio:.2f}")
    return rows


def training_rows(args: argparse.Namespace) -> list[list]:
    # the attention table imported relu_former before fairseq, so its fairseq half (model
    # registration) is loaded here explicitly, as for any script that builds fairseq objects
    import relu_former.plugin  # noqa: F401

    rows = []
    settings = {"sentences": 32, **{f"{n}-token documents": n for n in args.documents}}
    with tempfile.TemporaryDirectory(prefix="bench_relu_speed_") as tmp:
        data = Path(tmp)
        write_dictionaries(data, args.vocab)
        for width in args.widths:
            size = SIZE.format(w=width, f=2 * width).split()
            criterion = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing",
                         "0.1"]
            trainers = {name: build_trainer(data, "relu_former_iwslt_de_en",
                                            size + criterion + ["--attention-activation", name],
                                            max(settings.values()) + 8)
                        for name in ("relu", "softmax")}
            dictionary = trainers["relu"].task.target_dictionary
            for setting, length in settings.items():
                sample = synthetic_batch(dictionary, length, args.batch_tokens, seed=length)
                steps = {name: (lambda t=trainer, s=sample: t.train_step([s]))
                         for name, trainer in trainers.items()}
                seconds = interleaved_median_seconds(steps, rounds=args.rounds, warmup=1)
                words = {name: sample["ntokens"] / t for name, t in seconds.items()}
                ratio = words["relu"] / words["softmax"]
                rows.append([width, setting, words["softmax"], words["relu"], ratio,
                             "yes" if ratio >= WORDS_TARGET else "NO"])
                log(f"training width {width}, {setting}: relu/softmax words/s {ratio:.2f}")
    return rows


def report(args: argparse.Namespace, attention: list[list], decoder: list[list],
           training: list[list]) -> str:
    parts = {"attention": [
        "## One attention, forward + backward (ReLU / SDPA time)\n",
        f"{HEADS} heads, about {args.tokens} query tokens a call, no mask; target time ratio "
        f"<= {TIME_TARGET}, peak tensor memory ratio at the longest n <= {MEMORY_TARGET}.\n",
        markdown_table(["head dim", "n", "batch", "SDPA ms", "ReLU ms", "ReLU / SDPA", "met",
                        "memory ratio"], attention)], "decoder": [
        "## Decoder attentions at document length (ReLU / softmax module)\n",
        f"{args.decoder_length} queries and keys, batch 4, width 256, {HEADS} heads; forward + "
        "backward in training mode (attention dropout 0), the incremental step in evaluation "
        f"mode (its time: {INCREMENTAL_STEPS} steps); target time ratio <= {TIME_TARGET}.\n",
        markdown_table(["attention", "softmax ms", "ReLU ms", "ReLU / softmax", "met"],
                       decoder)], "training": [
        "## Training words/s (ReLU / softmax attention)\n",
        f"relu_former_iwslt_de_en, 2+2 layers, 4 heads, FFN 2x width, {args.batch_tokens} "
        f"target tokens a step, vocabulary {args.vocab}; target ratio >= {WORDS_TARGET}.\n",
        markdown_table(["width", "data", "softmax words/s", "ReLU words/s", "ReLU / softmax",
                        "met"], training)]}
    # glibc's allocator settings change a training step's time (page faults of the big
    # blocks it returns to the system and maps again), so the report says which were set
    malloc = ", ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                       if k.startswith("MALLOC_"))
    header = ["# bench_relu_speed: ReLU attention against softmax\n",
              f"{torch_setup()}, median of {args.rounds} interleaved rounds after 1 warm-up; "
              f"allocator: {malloc or 'glibc defaults'}.\n"]
    return "\n".join(header + [line for name in args.tables for line in parts[name]])


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    quiet_fairseq()
    log(f"bench_relu_speed: {torch_setup()}")
    measure = {"attention": attention_rows, "decoder": decoder_rows, "training": training_rows}
    rows = {name: measure[name](args) if name in args.tables else [] for name in TABLES}
    text = report(args, **rows)
    finish_report(args, "bench_relu_speed", text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
