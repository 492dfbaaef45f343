"""Pyramidion vs the same encoder without pooling: training step, decoding and peak memory.

Four models, all the plugin's ``pyramidion`` model with the same width and depth (softmax
attention, dropout 0, batch 1), in two pairs with the same attention in both members:

- full attention: ``vanilla`` (``--pooling-schedule none``) and ``pyramidion``;
- blocks of ``BLOCK`` tokens (``--attention-block-size``): ``blockwise`` (no pooling) and
  ``pyramidion_blocks``.

The Pyramidions use the ``pyramidion_base`` schedule scaled to the input: no pooling after
layer 1 (the paper found it clearly worse), ``LENGTH -> LENGTH/2`` after layer 2 and
``-> POOLED`` after layer 3 (8192 -> 4096 -> 2048 at full size); ``--schedule`` changes it.
Each speed-up is the model without pooling over the Pyramidion with the same attention.

Measured side by side in one process, interleaved (A, B, C, D, A, ...), median of the timed
rounds:

- training step: forward, backward and an Adam step on one (document, summary) pair;
- decoding: the encoder once, its output copied to ``BEAM`` hypotheses with the encoder's
  ``reorder_encoder_out`` (as fairseq's beam search does), then a fixed number of decoder
  steps with fairseq's incremental state (cached self-attention keys, cached projected
  encoder states), reordering the cache every step as beam search does; each hypothesis
  takes its arg-max (the beam bookkeeping itself is negligible). Default: beam 16 and 256
  steps, the paper's beam and about an arXiv abstract's length;
- encoder forward alone;
- peak memory: the most tensor bytes alive at once during one training step / one decoding
  run beyond what existed before it (``benchmarking.PeakTensorMemory``, which sees every
  tensor an operator returns, forward and backward; independent of other processes).

What limits the training speed-up is measured in the same interleaved rounds: the encoder
layers before the first pooling run at the full input length in both models, so the time of
those layers alone (embedding, layers 1..F, forward and backward, with each pair's attention)
bounds the ratio: baseline step / that time.

Paper targets (Pietruszka et al. 2022): training >= 3x and inference >= 2.4x faster. The paper's
pairing behind them is Pyramidion #13 (blocks of 512, 8192 -> 4096 -> 2048 after layers 2 and
3) against the full-attention vanilla model #3 at the same input length: here
``vanilla / pyramidion_blocks``, reported in its own table beside the two equal-attention
ratios (``vanilla / pyramidion``, ``blockwise / pyramidion_blocks``), each labelled. Both
models of that pairing have ``--layers`` + ``--layers`` layers here; the paper's #3 depth is not
published (``vanilla_full_attention_8k`` reads it as 2 + 2).

    python -m scripts.benchmarks.bench_pyramidion --quick --out bench/out   # about a minute
    python -m scripts.benchmarks.bench_pyramidion --out bench/out  # 8192 tokens, minutes
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from scripts.benchmarks.benchmarking import (
    BenchmarkParser,
    finish_report,
    interleaved_median_seconds,
    peak_memory_bytes,
    tagged_log,
)
from scripts.common.plotting import markdown_table, save_figure

TARGETS = {"training step": 3.0, "decoding": 2.4}
PHASES = {"training": "training step", "decoding": "decoding", "encoder": "encoder forward"}
# (baseline without pooling, Pyramidion with the same attention)
PAIRS = {"full attention": ("vanilla", "pyramidion"),
         "blocks": ("blockwise", "pyramidion_blocks")}
UNPOOLED = {"vanilla": "unpooled_layers", "blockwise": "unpooled_layers_blocks"}
# the paper's own pairing: full-attention vanilla #3 against Pyramidion #13 (blocks of 512)
PAPER_PAIR = ("vanilla", "pyramidion_blocks")
PAPER_PAIR_LABEL = "paper's pairing: vanilla #3 (full attention) / Pyramidion #13 (blocks)"
log = tagged_log("bench_pyramidion")


def parse_args(argv=None) -> argparse.Namespace:
    parser = BenchmarkParser(__doc__, quick_help="small sizes (2048 -> 512 tokens), about a "
                                                 "minute on one core")
    parser.add_argument("--length", type=int, default=None,
                        help="input tokens (default 8192; --quick 2048)")
    parser.add_argument("--pooled", type=int, default=None,
                        help="states the Pyramidion keeps after layer 2 (default length / 4)")
    parser.add_argument("--schedule", default=None,
                        help="override the Pyramidion's --pooling-schedule (default "
                             "'2:LENGTH/2,3:POOLED' as pyramidion_base; with 2 layers "
                             "'2:POOLED')")
    parser.add_argument("--embed-dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--heads", type=int, default=2, help="attention heads (default 2)")
    parser.add_argument("--layers", type=int, default=3,
                        help="encoder and decoder layers (default 3, as pyramidion_base; "
                             "at least 2)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="--attention-block-size of the blockwise models "
                             "(default length / 16: 512 at 8192, 128 with --quick)")
    parser.add_argument("--target-length", type=int, default=None,
                        help="summary tokens in the training step (default 256; --quick 64)")
    parser.add_argument("--decode-steps", type=int, default=None,
                        help="decoder steps (default 256; --quick 32)")
    parser.add_argument("--beam", type=int, default=None,
                        help="hypotheses decoded in parallel (default 16 as in the paper; "
                             "--quick 4; 1 = greedy)")
    parser.add_argument("--vocab", type=int, default=1000, help="vocabulary size (default 1000)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed interleaved rounds after one warm-up (default 3; --quick 2)")
    parser.add_argument("--phases", default="training,decoding,encoder",
                        help="comma list of what to measure: training, decoding, encoder "
                             "(default all three)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_threads_and_out("write OUT/bench_pyramidion.md and OUT/bench_pyramidion.png",
                               "torch threads (default 1)")
    args = parser.parse_args(argv)
    quick = args.quick
    own_schedule = args.schedule is not None
    args.length = args.length or (2048 if quick else 8192)
    args.pooled = args.pooled or args.length // 4
    args.block_size = args.block_size or max(1, args.length // 16)
    if args.schedule is None:
        args.schedule = (f"2:{args.length // 2},3:{args.pooled}" if args.layers >= 3
                         else f"2:{args.pooled}")
    args.target_length = args.target_length or (64 if quick else 256)
    args.decode_steps = args.decode_steps or (32 if quick else 256)
    args.beam = args.beam or (4 if quick else 16)
    args.rounds = args.rounds or (2 if quick else 3)
    args.phases = [phase.strip() for phase in args.phases.split(",") if phase.strip()]
    unknown = sorted(set(args.phases) - set(PHASES))
    if unknown or not args.phases:
        parser.error(f"--phases: unknown {unknown}; choose from {', '.join(PHASES)}")
    for name in ("length", "pooled", "block_size", "target_length", "decode_steps", "beam",
                 "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.layers < 2:
        parser.error("--layers must be at least 2 (no pooling after layer 1)")
    if not own_schedule and args.pooled >= args.length // 2:
        parser.error(f"--pooled {args.pooled} must be below --length / 2 = {args.length // 2}")
    return args


def build_model(args: argparse.Namespace, dictionary, schedule: str, block_size: int,
                encoder_layers: int | None = None):
    from relu_former.pyramidion.model import PyramidionModel, pyramidion_base

    model_args = argparse.Namespace(
        encoder_layers=encoder_layers or args.layers, decoder_layers=args.layers,
        encoder_embed_dim=args.embed_dim, decoder_embed_dim=args.embed_dim,
        encoder_ffn_embed_dim=2 * args.embed_dim, decoder_ffn_embed_dim=2 * args.embed_dim,
        encoder_attention_heads=args.heads, decoder_attention_heads=args.heads,
        dropout=0.0, max_source_positions=args.length, max_target_positions=1024,
        pooling_schedule=schedule, attention_block_size=block_size,
        attention_activation="softmax", share_all_embeddings=True,
    )
    pyramidion_base(model_args)
    task = argparse.Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    torch.manual_seed(0)
    return PyramidionModel.build_model(model_args, task).to(args.device)


def make_cases(args: argparse.Namespace, models: dict) -> dict[str, dict]:
    """``{phase: {model: step function}}`` on one fixed random (document, summary) pair."""
    from fairseq.data import Dictionary

    dictionary = next(iter(models.values())).encoder.dictionary
    assert isinstance(dictionary, Dictionary)
    generator = torch.Generator().manual_seed(1)
    low = dictionary.nspecial

    def sentence(length: int) -> torch.Tensor:
        words = torch.randint(low, len(dictionary), (1, length - 1), generator=generator)
        return torch.cat([words, torch.full((1, 1), dictionary.eos())], 1).to(args.device)

    source, target = sentence(args.length), sentence(args.target_length)
    lengths = torch.tensor([args.length], device=args.device)
    previous = torch.cat([target[:, -1:], target[:, :-1]], 1)  # EOS-shifted, as fairseq
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-4) for name, m in models.items()}

    def train_step(name: str) -> None:
        model, optimizer = models[name], optimizers[name]
        model.train()
        optimizer.zero_grad(set_to_none=True)
        logits, _ = model(source, lengths, previous)
        F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1)).backward()
        optimizer.step()

    @torch.no_grad()
    def decode(name: str) -> None:
        model = models[name].eval()
        encoder_out = model.encoder(source, src_lengths=lengths)
        beams = torch.zeros(args.beam, dtype=torch.long, device=args.device)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, beams)
        keep = torch.arange(args.beam, device=args.device)
        state: dict = {}
        tokens = torch.full((args.beam, 1), dictionary.eos(), device=args.device)
        for _ in range(args.decode_steps):
            logits, _ = model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)
            model.decoder.reorder_incremental_state_scripting(state, keep)
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], 1)

    @torch.no_grad()
    def encode(name: str) -> None:
        models[name].eval().encoder(source, src_lengths=lengths)

    def unpooled_layers(name: str) -> None:
        """Forward and backward of the layers that run at full length (no optimizer)."""
        model = models[name]
        model.train()
        model.zero_grad(set_to_none=True)
        model.encoder(source, src_lengths=lengths)["encoder_out"][0].sum().backward()

    functions = {"training": train_step, "decoding": decode, "encoder": encode}
    cases = {}
    for phase in args.phases:
        cases[PHASES[phase]] = {name: (lambda f=functions[phase], n=name: f(n))
                                for name in models if name not in UNPOOLED.values()}
    if "training" in args.phases:
        cases[PHASES["training"]].update({name: (lambda n=name: unpooled_layers(n))
                                          for name in UNPOOLED.values()})
    return cases


def measure(args: argparse.Namespace) -> dict:
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(args.vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    models = {
        "vanilla": build_model(args, dictionary, "none", 0),
        "pyramidion": build_model(args, dictionary, args.schedule, 0),
        "blockwise": build_model(args, dictionary, "none", args.block_size),
        "pyramidion_blocks": build_model(args, dictionary, args.schedule, args.block_size),
    }
    pooled = models["pyramidion"].encoder.pooling_schedule
    first = min(pooled) if pooled else args.layers
    if "training" in args.phases:
        models[UNPOOLED["vanilla"]] = build_model(args, dictionary, "none", 0, first)
        models[UNPOOLED["blockwise"]] = build_model(args, dictionary, "none", args.block_size,
                                                    first)
    log(f"pyramidion pools after layers {pooled}; blocks of {args.block_size}; "
        f"{args.length} input tokens, width {args.embed_dim}, {args.layers}+{args.layers} layers")
    cases = make_cases(args, models)
    seconds, peaks = {}, {}
    for phase, steps in cases.items():
        log(f"{phase}: {args.rounds} interleaved rounds after 1 warm-up")
        seconds[phase] = interleaved_median_seconds(
            steps, rounds=args.rounds, warmup=1, progress=lambda s, p=phase: log(f"  {p} {s}"))
        if phase != "encoder forward":
            peaks[phase] = {name: peak_memory_bytes(step) for name, step in steps.items()
                            if name not in UNPOOLED.values()}
            log(f"  {phase} peak memory measured")
    return {"seconds": seconds, "peaks": peaks, "first_pooled_layer": first}


def ratio_rows(measures: dict) -> list[list]:
    """Per measure: baseline / Pyramidion for each pair, the paper target and whether met."""
    rows = []
    for measure, values in measures.items():
        phase = measure.rsplit(" ", 2)[0] if measure.endswith("(s)") else None
        target = TARGETS.get(phase) if phase else None
        ratios = [values[base] / values[model] for base, model in PAIRS.values()]
        met = "-"
        if target:
            met = ", ".join(f"{pair}: {'yes' if ratio >= target else 'NO'}"
                            for pair, ratio in zip(PAIRS, ratios))
        rows.append([measure] + ratios + [f">= {target}" if target else "-", met])
    return rows


def paper_pair_rows(measures: dict) -> list[list]:
    """The paper's pairing, #3 / #13 = vanilla / pyramidion_blocks, for each time measured,
    with the paper's claim and whether it is met."""
    base, model = PAPER_PAIR
    rows = []
    for measure, values in measures.items():
        if not measure.endswith("time (s)"):
            continue
        target = TARGETS.get(measure.rsplit(" ", 2)[0])
        ratio = values[base] / values[model]
        rows.append([measure, ratio, f"{target}x" if target else "-",
                     ("yes" if ratio >= target else "NO") if target else "-"])
    return rows


def limit_rows(seconds: dict, first: int) -> list[list]:
    """The part of the training step that pooling cannot shorten, and the bound it sets."""
    training = seconds.get(PHASES["training"])
    if not training:
        return []
    bases = [base for base, _ in PAIRS.values()]
    unpooled = [training[UNPOOLED[base]] for base in bases]
    return [
        [f"embedding + encoder layers 1..{first}, forward + backward (s)"] + unpooled,
        ["share of the baseline's training step"]
        + [u / training[base] for u, base in zip(unpooled, bases)],
        ["bound on the training speed-up (baseline step / that)"]
        + [training[base] / u for u, base in zip(unpooled, bases)],
        ["measured training speed-up"]
        + [training[base] / training[model] for base, model in PAIRS.values()],
    ]


def report(args: argparse.Namespace, results: dict) -> str:
    seconds, peaks = results["seconds"], results["peaks"]
    measures = {f"{phase} time (s)": v for phase, v in seconds.items()}
    measures.update({f"{phase} peak MiB": {n: b / 2**20 for n, b in v.items()}
                     for phase, v in peaks.items()})
    names = list(next(iter(seconds.values())))
    raw_rows = [[measure] + [values.get(n, "-") for n in names]
                for measure, values in measures.items()]
    pairs = [f"{pair}: {base} / {model}" for pair, (base, model) in PAIRS.items()]
    first = results["first_pooled_layer"]
    settings = (
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} "
        f"thread(s); input {args.length} tokens, batch 1, width {args.embed_dim}, "
        f"{args.heads} heads, FFN {2 * args.embed_dim}, {args.layers} encoder + {args.layers} "
        f"decoder layers, vocabulary {args.vocab}, softmax attention; pyramidion models "
        f"`--pooling-schedule {args.schedule}`; blockwise models `--attention-block-size "
        f"{args.block_size}`; training target {args.target_length} tokens; decoding "
        f"{args.decode_steps} steps x beam {args.beam}; median of {args.rounds} interleaved "
        "rounds after 1 warm-up"
    )
    parts = [
        "# bench_pyramidion: Pyramidion vs the same encoder without pooling\n",
        settings + "\n",
        "## Equal-attention ratios: model without pooling / Pyramidion, same attention in "
        "both (measured side by side in this run; > 1 = Pyramidion faster or smaller)\n",
        markdown_table(["measure"] + pairs + ["paper target", "met"], ratio_rows(measures)),
        "## The paper's pairing: full-attention vanilla (#3) / Pyramidion with blocks (#13), "
        "same input length (the comparison behind the paper's 3x training and 2.4x "
        "inference)\n",
        markdown_table(["measure", f"{PAPER_PAIR_LABEL}: {PAPER_PAIR[0]} / {PAPER_PAIR[1]}",
                        "paper", "met"], paper_pair_rows(measures)),
    ]
    limits = limit_rows(seconds, first)
    if limits:
        parts += [
            "## What limits the training speed-up (measured in the same rounds)\n",
            f"Layers 1..{first} run at the full {args.length} tokens in both models of a pair "
            "(the first pooling follows layer "
            f"{first}); their forward and backward alone bound the speed-up of a training "
            "step.\n",
            markdown_table(["measure"] + list(PAIRS), limits),
        ]
    parts += [
        "## Measured values\n",
        markdown_table(["measure"] + names, raw_rows),
        "Peak memory: the most tensor memory alive at once during the step beyond what "
        "existed before it (parameters, Adam state, inputs).\n",
    ]
    return "\n".join(parts)


def plot(path: Path, results: dict) -> Path:
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [(f"{p}\ntime", v) for p, v in results["seconds"].items()]
    measures += [(f"{p}\npeak memory", v) for p, v in results["peaks"].items()]
    fig, ax = plt.subplots(figsize=(8.0, 4.0))
    # the two equal-attention pairs, then the paper's own pairing (#3 / #13)
    bars = {f"equal attention, {pair}": pair_models for pair, pair_models in PAIRS.items()}
    bars["paper's pairing #3 / #13"] = PAPER_PAIR
    width = 0.8 / len(bars)
    for i, (pair, (base, model)) in enumerate(bars.items()):
        xs = [x + (i - (len(bars) - 1) / 2) * width for x in range(len(measures))]
        ax.bar(xs, [v[base] / v[model] for _, v in measures], width,
               label=f"{pair}: {base} / {model}")
    for x, (label, _) in enumerate(measures):
        target = TARGETS.get(label.split("\n")[0]) if label.endswith("time") else None
        if target:
            ax.plot([x - 0.45, x + 0.45], [target, target], color="black", linestyle="--")
    ax.axhline(1.0, color="grey", linewidth=1)
    ax.set_xticks(range(len(measures)))
    ax.set_xticklabels([label for label, _ in measures], fontsize="small")
    ax.set_ylabel("without pooling / Pyramidion")
    ax.set_title("Pyramidion's speed-up and memory saving (dashed: paper targets)",
                 fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    results = measure(args)
    text = report(args, results)
    page = finish_report(args, "bench_pyramidion", text, "\n![ratios](bench_pyramidion.png)\n")
    if page is not None:
        png = plot(args.out / "bench_pyramidion.png", results)
        log(f"wrote {page}, {png}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
