"""Attention and FFN-memory statistics of trained checkpoints, per layer and head, with plots.

For every checkpoint given (e.g. a softmax Transformer and a ReLUFormer trained on the same
data) the model reads sentences of one split with teacher forcing, and every attention
module and FFN reports its weights. For each row i (a query of one head; for an FFN, a token
over the memory slots) over the n_i keys it may see, with w_ij >= 0 the weights the module
applies (ReLU rows need not sum to one; every figure below is invariant to a row's scale),
S_i = sum_j w_ij and p_ij = w_ij / S_i:

    entropy      mean over rows of H_i = -sum_j p_ij log p_ij (nats; rows with S_i = 0 skipped)
    zeros        share of the visible weights that are exactly 0
    top mass     mean over rows of (sum of the ceil(0.002 n_i) largest w_ij) / S_i  (paper: >85%
                 for softmax FFN memories); --top-share sets 0.002
    empty rows   share of rows with S_i = 0 (every weight zero)
    anisotropy   FFN only: mean pairwise cosine between the value vectors (columns of fc2's
                 weight), over distinct pairs
    L_norm       ReLU attention only: ReLUFormer's normalisation term, mean over rows of
                 |log S_i| with S_i the row sum of the ReLU scores (--norm-row-sum weights:
                 of the weights applied to the values)
    L_ent below  ReLU attention only: mean of max(C log n_i - H_i, 0), C = --entropy-margin
    L_ent above  ReLU attention only: mean of max(H_i - C log n_i, 0)

The two regulariser terms are those the training criterion adds
(``criterions/regularized.py``), read from the module's own row statistics, both sides of the
entropy margin, so checkpoints trained with either reading compare on one scale.

FFN memory scores are the FFN's activation applied to fc1's output (ReLU; softmax for
relu_former's --ffn-activation softmax/softmax_ln). Decoder self-attention rows see only the
keys up to themselves. The outputs, in --out:

    analyze_attention.md                        summary and per-layer/head tables
    analyze_attention_{entropy,zeros,top_mass}.png   per layer (heads as dots, lines = mean)
    analyze_attention_anisotropy.png            FFN value-slot anisotropy per layer
    analyze_attention_heatmap.png               one sentence's attention, one panel per model

and with ``--json FILE`` each model's means over every attention row (every attention module,
layer and head; no FFN rows) as JSON, e.g. for a table that reports one entropy per model.

    python -m scripts.analysis.analyze_attention DATA_BIN --path relu/checkpoint_best.pt \\
        softmax/checkpoint_best.pt --out analysis --gen-subset valid --sentence 3
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import Tensor

from scripts.analysis.attention_plots import heatmaps, panel_plot
from scripts.common.atomic_files import write_text_atomic
from scripts.common.plotting import markdown_table

MODULES = ("encoder.self_attn", "decoder.self_attn", "decoder.encoder_attn",
           "encoder.ffn", "decoder.ffn")
REGULARIZER_COLUMNS = ("norm_loss", "entropy_below", "entropy_above")
METRICS = (("entropy", "entropy (nats)"), ("zeros", "share of zero weights"),
           ("top_mass", "mass in the top weights"))


# ---------------------------------------------------------------- statistics (pure torch)

@dataclass
class RowSums:
    """Sums over rows that make the means of the module docstring; add them up, then read."""

    rows: int = 0
    nonempty_rows: int = 0
    entropy: float = 0.0
    top_mass: float = 0.0
    zeros: int = 0
    visible: int = 0
    reg_rows: int = 0
    norm_loss: float = 0.0
    entropy_below: float = 0.0
    entropy_above: float = 0.0

    def add(self, other: RowSums) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def means(self) -> dict[str, float]:
        nonempty = self.nonempty_rows or math.nan
        return {
            "rows": self.rows,
            "entropy": self.entropy / nonempty,
            "zeros": self.zeros / (self.visible or math.nan),
            "top_mass": self.top_mass / nonempty,
            "empty_rows": (self.rows - self.nonempty_rows) / (self.rows or math.nan),
            "norm_loss": self.norm_loss / (self.reg_rows or math.nan),
            "entropy_below": self.entropy_below / (self.reg_rows or math.nan),
            "entropy_above": self.entropy_above / (self.reg_rows or math.nan),
        }


def row_sums(weights: Tensor, visible: Tensor | None = None, top_share: float = 0.002) -> RowSums:
    """Entropy, zero and top-mass sums of the rows of ``weights`` (``(..., keys)``, >= 0).

    ``visible`` (bool, broadcastable to ``weights``) marks the keys each row may see; the
    others are ignored whatever their value.
    """
    w = weights.detach().to(torch.float64).reshape(-1, weights.size(-1))
    if visible is None:
        seen = torch.ones_like(w, dtype=torch.bool)
    else:
        seen = visible.expand_as(weights).reshape(-1, weights.size(-1))
    if (w[seen] < 0).any():
        raise ValueError("attention weights must be non-negative")
    w = w.masked_fill(~seen, 0.0)
    n = seen.sum(-1)
    total = w.sum(-1)
    nonempty = total > 0
    p = w[nonempty] / total[nonempty, None]
    entropy = -torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros_like(p)).sum(-1)
    # top-k with a per-row k: sort once, keep the first k_i of each sorted row
    k = torch.clamp(torch.ceil(top_share * n[nonempty].to(torch.float64)), min=1)
    ranked = p.sort(dim=-1, descending=True).values
    positions = torch.arange(ranked.size(-1), dtype=torch.float64)
    top = (ranked * (positions < k[:, None])).sum(-1)
    return RowSums(
        rows=int(w.size(0)), nonempty_rows=int(nonempty.sum()),
        entropy=float(entropy.sum()), top_mass=float(top.sum()),
        zeros=int(((w == 0) & seen).sum()), visible=int(n.sum()),
    )


def regularizer_sums(statistics, margin: float) -> list[RowSums]:
    """Per head: the sums of L_norm and of L_ent on either side of the margin, over the valid
    rows of one module's ``AttentionStatistics`` (empty for modules that are not regularised).
    """
    from relu_former.relu_attention.regularisers import entropy_margin_rows, norm_rows

    if statistics is None or not statistics.regularizable:
        return []
    valid = statistics.valid
    terms = {
        "norm_loss": norm_rows(statistics.row_sum),
        "entropy_below": entropy_margin_rows(statistics.entropy, statistics.n, margin, "below"),
        "entropy_above": entropy_margin_rows(statistics.entropy, statistics.n, margin, "above"),
    }
    heads = []
    for head in range(valid.size(1)):
        rows = valid[:, head]
        sums = {name: float(value.detach()[:, head].to(torch.float64)[rows].sum())
                for name, value in terms.items()}
        heads.append(RowSums(reg_rows=int(rows.sum()), **sums))
    return heads


def anisotropy(value_vectors: Tensor) -> float:
    """Mean cosine similarity of distinct pairs of rows of ``value_vectors`` (slots x dim)."""
    u = torch.nn.functional.normalize(value_vectors.detach().to(torch.float64), dim=-1)
    m = u.size(0)
    if m < 2:
        return math.nan
    # sum over i != j of u_i . u_j = |sum_i u_i|^2 - sum_i |u_i|^2, without an m x m matrix
    pair_sum = u.sum(0).pow(2).sum() - u.pow(2).sum()
    return float(pair_sum / (m * (m - 1)))


# ---------------------------------------------------------------- capturing a model's weights

def attention_modules(model) -> Iterator[tuple[str, int, torch.nn.Module]]:
    """``(module kind, layer, attention module)`` of an encoder-decoder fairseq model."""
    for side in ("encoder", "decoder"):
        for index, layer in enumerate(getattr(model, side).layers):
            for name in ("self_attn", "encoder_attn"):
                module = getattr(layer, name, None)
                if module is not None:
                    yield f"{side}.{name}", index, module


def ffn_layers(model) -> Iterator[tuple[str, int, torch.nn.Module]]:
    for side in ("encoder", "decoder"):
        for index, layer in enumerate(getattr(model, side).layers):
            yield f"{side}.ffn", index, layer


def memory_activation(layer) -> Callable[[Tensor], Tensor]:
    """The function that turns fc1's output into the FFN's memory scores."""
    function = getattr(layer, "activation_fn", None)
    if not callable(function):
        raise ValueError(f"{type(layer).__name__} has no activation_fn; cannot read its FFN "
                         "memory scores")
    return function


def per_head_weights(weights: Tensor, heads: int) -> Tensor:
    """Attention weights of a batch of one as ``(heads, queries, keys)``.

    fairseq's MultiheadAttention returns ``(heads, batch, Tq, Tk)`` for need_head_weights;
    a batch-first ``(batch, heads, Tq, Tk)`` is accepted as well.
    """
    if weights.dim() != 4:
        raise ValueError(f"expected 4-d per-head attention weights, got {tuple(weights.shape)}; "
                         "the module ignored need_head_weights")
    if weights.size(0) == heads and weights.size(1) == 1:
        return weights[:, 0]
    if weights.size(0) == 1 and weights.size(1) == heads:
        return weights[0]
    raise ValueError(f"cannot read {heads} heads of one sentence from {tuple(weights.shape)}")


class Recorder:
    """Hooks that make every attention module return per-head weights and keep them."""

    def __init__(self, model, row_sum: str = "scores") -> None:
        self.attention: dict[tuple[str, int], Tensor] = {}
        self.memory: dict[tuple[str, int], Tensor] = {}
        self.statistics: dict[tuple[str, int], object] = {}
        self.row_sum = row_sum
        self._handles = []
        for kind, index, module in attention_modules(model):
            # the plugin's attention computes its per-row figures only on request
            if hasattr(module, "need_statistics"):
                module.need_statistics = True
            # fairseq's fast path (PyTorch's fused attention) can only return head-averaged
            # weights; this switch sends the module through its own per-head code path.
            if hasattr(module, "skip_embed_dim_check"):
                module.skip_embed_dim_check = True
            self._handles.append(module.register_forward_pre_hook(self._ask_weights,
                                                                  with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._keep_weights(kind, index)))
        for kind, index, layer in ffn_layers(model):
            self._handles.append(layer.fc1.register_forward_hook(
                self._keep_memory(kind, index, memory_activation(layer))))

    @staticmethod
    def _ask_weights(module, args, kwargs):
        kwargs["need_weights"] = True
        kwargs["need_head_weights"] = True
        return args, kwargs

    def _keep_weights(self, kind: str, index: int):
        def hook(module, args, output):
            if output[1] is None:
                raise ValueError(f"{kind}[{index}] ({type(module).__name__}) returned no "
                                 "weights although need_head_weights=True")
            self.attention[(kind, index)] = per_head_weights(output[1].detach(),
                                                             module.num_heads)
            getter = getattr(module, "attention_statistics", None)
            if callable(getter):
                self.statistics[(kind, index)] = getter(row_sum=self.row_sum)
        return hook

    def _keep_memory(self, kind: str, index: int, activation):
        def hook(module, args, output):
            self.memory[(kind, index)] = activation(output.detach().float())
        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


# ---------------------------------------------------------------- running checkpoints

@dataclass
class Analysis:
    label: str
    sums: dict  # (module, layer, head) -> RowSums; head -1 for FFN rows
    anisotropy: dict  # (module, layer) -> float
    heatmap: Tensor | None
    heatmap_tokens: tuple[list[str], list[str]] | None
    heatmap_layer: int | None

    def attention_means(self) -> dict[str, float]:
        """The means of :class:`RowSums` over every row of every attention (not FFN) module."""
        total = RowSums()
        for (module, _, _), sums in self.sums.items():
            if module.endswith("attn"):
                total.add(sums)
        return total.means()


def load(path: str, data: str, split: str):
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        raise SystemExit(f"--path: no checkpoint at {path}")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": data})
    task.load_dataset(split)
    model = models[0].eval()
    if not hasattr(model, "encoder") or not hasattr(model, "decoder"):
        raise SystemExit(f"--path {path}: expected an encoder-decoder model, got "
                         f"{type(model).__name__}")
    return model, cfg, task


def default_label(cfg) -> str:
    """What the model attends with: --attention-activation, or softmax for stock fairseq."""
    return str(getattr(cfg.model, "attention_activation", None) or "softmax")


def heatmap_labels(task, sample, kind: str) -> tuple[list[str], list[str]]:
    source = [task.source_dictionary[i] for i in sample["net_input"]["src_tokens"][0]]
    target = [task.target_dictionary[i] for i in sample["target"][0]]
    previous = [task.target_dictionary[i] for i in sample["net_input"]["prev_output_tokens"][0]]
    if kind == "encoder.self_attn":
        return source, source
    if kind == "decoder.self_attn":
        return previous, target
    return source, target


def analyze(path: str, label: str | None, args: argparse.Namespace) -> Analysis:
    model, cfg, task = load(path, args.data, args.gen_subset)
    label = label or default_label(cfg)
    dataset = task.dataset(args.gen_subset)
    count = min(len(dataset), args.max_sentences)
    if not 0 <= args.sentence < len(dataset):
        raise SystemExit(f"--sentence {args.sentence}: split {args.gen_subset} has "
                         f"{len(dataset)} sentences")
    indices = list(range(count))
    if args.sentence not in indices:
        indices.append(args.sentence)
    sums: dict = defaultdict(RowSums)
    anisotropies = {(kind, index): anisotropy(layer.fc2.weight.t())
                    for kind, index, layer in ffn_layers(model)}
    recorder = Recorder(model, args.norm_row_sum)
    heatmap, tokens, heatmap_layer = None, None, None
    try:
        with torch.no_grad():
            for step, index in enumerate(indices, start=1):
                sample = dataset.collater([dataset[index]])
                model(**sample["net_input"])
                if index == args.sentence:
                    heatmap, tokens, heatmap_layer = pick_heatmap(recorder, task, sample, args)
                if index >= count:
                    continue  # the heat-map sentence lies beyond --max-sentences
                accumulate(sums, recorder, args.top_share, args.entropy_margin)
                if step % 50 == 0 or step == count:
                    print(f"{label}: {step}/{count} sentences", file=sys.stderr, flush=True)
    finally:
        recorder.remove()
    return Analysis(label, dict(sums), anisotropies, heatmap, tokens, heatmap_layer)


def accumulate(sums: dict, recorder: Recorder, top_share: float, margin: float = 0.7) -> None:
    for (kind, layer), statistics in recorder.statistics.items():
        for head, terms in enumerate(regularizer_sums(statistics, margin)):
            sums[(kind, layer, head)].add(terms)
    for (kind, layer), weights in recorder.attention.items():
        queries, keys = weights.shape[-2:]
        visible = None
        if kind == "decoder.self_attn":
            visible = torch.ones(queries, keys, dtype=torch.bool).tril()
        for head in range(weights.size(0)):
            sums[(kind, layer, head)].add(row_sums(weights[head], visible, top_share))
    for (kind, layer), scores in recorder.memory.items():
        sums[(kind, layer, -1)].add(row_sums(scores, None, top_share))


def pick_heatmap(recorder: Recorder, task, sample, args) -> tuple[Tensor, tuple, int]:
    """The heat-map matrix (queries x keys), its token labels and the layer it comes from."""
    layers = sorted(layer for kind, layer in recorder.attention if kind == args.heatmap_module)
    if not layers:
        raise SystemExit(f"--heatmap-module {args.heatmap_module}: the model has no such "
                         f"attention (choices: {', '.join(MODULES[:3])})")
    if not -len(layers) <= args.heatmap_layer < len(layers):
        raise SystemExit(f"--heatmap-layer {args.heatmap_layer}: the model has {len(layers)} "
                         "layers")
    layer = layers[args.heatmap_layer]
    weights = recorder.attention[(args.heatmap_module, layer)]
    if args.heatmap_head is None:
        matrix = weights.mean(0)
    elif 0 <= args.heatmap_head < weights.size(0):
        matrix = weights[args.heatmap_head]
    else:
        raise SystemExit(f"--heatmap-head {args.heatmap_head}: the model has "
                         f"{weights.size(0)} heads")
    return matrix.float(), heatmap_labels(task, sample, args.heatmap_module), layer


# ---------------------------------------------------------------- outputs

def table_rows(analyses: list[Analysis]) -> list[list]:
    rows = []
    for analysis in analyses:
        for (kind, layer, head), sums in sorted(
                analysis.sums.items(), key=lambda item: (MODULES.index(item[0][0]),
                                                         item[0][1], item[0][2])):
            means = sums.means()
            aniso = analysis.anisotropy.get((kind, layer), math.nan) if head < 0 else "-"
            rows.append([analysis.label, kind, layer, "-" if head < 0 else head, means["rows"],
                         means["entropy"], means["zeros"], means["top_mass"],
                         means["empty_rows"], aniso, *regularizer_cells(means)])
    return rows


def regularizer_cells(means: dict) -> list:
    """L_norm, L_ent below, L_ent above; "-" where the module is not ReLU attention."""
    return ["-" if math.isnan(means[name]) else means[name] for name in REGULARIZER_COLUMNS]


def layer_rows(analyses: list[Analysis]) -> list[list]:
    """Attention modules per layer, heads pooled: entropy, zeros and the regulariser terms."""
    rows = []
    for analysis in analyses:
        per_layer: dict = defaultdict(RowSums)
        for (kind, layer, _), sums in analysis.sums.items():
            if kind.endswith("attn"):
                per_layer[(kind, layer)].add(sums)
        for (kind, layer), total in sorted(per_layer.items(),
                                           key=lambda item: (MODULES.index(item[0][0]),
                                                             item[0][1])):
            means = total.means()
            rows.append([analysis.label, kind, layer, means["entropy"], means["zeros"],
                         *regularizer_cells(means)])
    return rows


def summary_rows(analyses: list[Analysis]) -> list[list]:
    rows = []
    for analysis in analyses:
        for kind in MODULES:
            total = RowSums()
            for (module, _, _), sums in analysis.sums.items():
                if module == kind:
                    total.add(sums)
            if not total.rows:
                continue
            means = total.means()
            values = [v for (m, _), v in analysis.anisotropy.items() if m == kind]
            aniso = sum(values) / len(values) if values else "-"
            rows.append([analysis.label, kind, means["rows"], means["entropy"], means["zeros"],
                         means["top_mass"], means["empty_rows"], aniso,
                         *regularizer_cells(means)])
    return rows


def write_outputs(analyses: list[Analysis], args: argparse.Namespace) -> list[Path]:
    out: Path = args.out
    top = f"top {100 * args.top_share:g}% mass"
    terms = ["L_norm", "L_ent below", "L_ent above"]
    headers = ["model", "module", "entropy", "zeros", top, "empty rows", "anisotropy", *terms]
    text = "\n".join([
        "# analyze_attention\n",
        f"checkpoints: {', '.join(f'{a.label} = {p}' for a, p in zip(analyses, args.path))}; "
        f"data {args.data}, split {args.gen_subset}, first {args.max_sentences} sentences, "
        f"teacher forcing; regulariser terms with C = {args.entropy_margin}, L_norm on the "
        f"row sums of the {args.norm_row_sum} (ReLU attention only)\n",
        "## Summary (all layers and heads)\n",
        markdown_table(headers[:2] + ["rows"] + headers[2:], summary_rows(analyses)),
        "## Attention per layer (heads pooled)\n",
        markdown_table(["model", "module", "layer", "entropy", "zeros", *terms],
                       layer_rows(analyses)),
        "## Per layer and head (FFN rows: head -)\n",
        markdown_table(headers[:2] + ["layer", "head", "rows"] + headers[2:],
                       table_rows(analyses)),
    ])
    written = [write_text_atomic(out / "analyze_attention.md", text)]
    present = [m for m in MODULES if any(k[0] == m for a in analyses for k in a.sums)]
    for metric, axis in METRICS:
        lines: dict = {m: {} for m in present}
        dots: dict = {m: {} for m in present}
        for analysis in analyses:
            for module in present:
                per_layer = defaultdict(list)
                for (kind, layer, _), sums in analysis.sums.items():
                    if kind == module:
                        per_layer[layer].append(sums.means()[metric])
                layers = sorted(per_layer)
                lines[module][analysis.label] = (
                    layers, [sum(per_layer[x]) / len(per_layer[x]) for x in layers])
                dots[module][analysis.label] = (
                    [x for x in layers for _ in per_layer[x]],
                    [v for x in layers for v in per_layer[x]])
        title = (f"mass in the top {100 * args.top_share:g}% of a row's weights"
                 if metric == "top_mass" else axis)
        written.append(panel_plot(out / f"analyze_attention_{metric}.png", lines, title,
                                  "layer", axis, dots, integer_x=True))
    ffn = {m: {a.label: (sorted(x for k, x in a.anisotropy if k == m),
                         [a.anisotropy[(m, x)] for x in sorted(x for k, x in a.anisotropy
                                                                if k == m)])
               for a in analyses} for m in ("encoder.ffn", "decoder.ffn")}
    written.append(panel_plot(out / "analyze_attention_anisotropy.png", ffn,
                              "FFN value-slot anisotropy", "layer", "mean pairwise cosine",
                              integer_x=True))
    maps = [(a.label, a.heatmap.numpy()) for a in analyses if a.heatmap is not None]
    if maps:
        keys, queries = analyses[0].heatmap_tokens
        head = "mean of heads" if args.heatmap_head is None else f"head {args.heatmap_head}"
        title = (f"{args.heatmap_module}, layer {analyses[0].heatmap_layer}, {head}, "
                 f"sentence {args.sentence} of {args.gen_subset}")
        written.append(heatmaps(out / "analyze_attention_heatmap.png", maps, keys, queries,
                                title))
    return written


def write_json(path: Path, analyses: list[Analysis], args: argparse.Namespace) -> Path:
    """Per model its label, checkpoint and :meth:`Analysis.attention_means` (NaN, e.g. the
    regulariser terms of softmax attention, as null), with the data and split they were read
    from."""
    models = [{"label": analysis.label, "path": str(checkpoint),
               "attention": {name: None if isinstance(value, float) and math.isnan(value)
                             else value for name, value in analysis.attention_means().items()}}
              for analysis, checkpoint in zip(analyses, args.path)]
    return write_text_atomic(path, json.dumps(
        {"data": args.data, "split": args.gen_subset, "max_sentences": args.max_sentences,
         "models": models}, indent=1) + "\n")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="fairseq binarized data folder (fairseq-preprocess output)")
    parser.add_argument("--path", nargs="+", required=True,
                        help="checkpoint(s) to analyse, e.g. a softmax and a ReLU model")
    parser.add_argument("--labels", nargs="+", default=None,
                        help="a name per checkpoint (default: its --attention-activation)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the table and PNGs")
    parser.add_argument("--gen-subset", default="valid", help="split to read (default valid)")
    parser.add_argument("--max-sentences", type=int, default=200,
                        help="sentences to average over, from the start (default 200)")
    parser.add_argument("--top-share", type=float, default=0.002,
                        help="share of a row's largest weights for the top-mass figure "
                             "(default 0.002, the paper's 0.2%%)")
    parser.add_argument("--sentence", type=int, default=0,
                        help="index of the sentence of the heat map (default 0)")
    parser.add_argument("--heatmap-module", default="decoder.encoder_attn", choices=MODULES[:3],
                        help="attention shown in the heat map (default decoder.encoder_attn)")
    parser.add_argument("--heatmap-layer", type=int, default=-1,
                        help="layer of the heat map, Python index (default -1, the last)")
    parser.add_argument("--heatmap-head", type=int, default=None,
                        help="head of the heat map (default: the mean of the heads)")
    parser.add_argument("--entropy-margin", type=float, default=0.7,
                        help="C of the entropy-margin term L_ent (default 0.7, the paper's)")
    parser.add_argument("--norm-row-sum", choices=("scores", "weights"), default="scores",
                        help="row sum of the L_norm column: of the ReLU scores (default) or of "
                             "the weights applied to the values")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write each model's means over every attention row to FILE")
    args = parser.parse_args(argv)
    if args.labels is not None and len(args.labels) != len(args.path):
        parser.error(f"--labels gives {len(args.labels)} names for {len(args.path)} --path "
                     "checkpoints")
    if not 0 < args.top_share <= 1:
        parser.error(f"--top-share must be in (0, 1], got {args.top_share}")
    if not (math.isfinite(args.entropy_margin) and args.entropy_margin >= 0):
        parser.error(f"--entropy-margin must be a finite number >= 0, got {args.entropy_margin}")
    if args.max_sentences < 1:
        parser.error("--max-sentences must be positive")
    if not os.path.isdir(args.data):
        parser.error(f"data folder {args.data} does not exist")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    import relu_former.plugin  # noqa: F401  (registers the plugin's models before loading)

    logging.getLogger("fairseq").setLevel(logging.WARNING)
    labels = args.labels or [None] * len(args.path)
    analyses = [analyze(path, label, args) for path, label in zip(args.path, labels)]
    seen: dict[str, int] = {}
    for analysis in analyses:  # two checkpoints with one activation: tell them apart
        seen[analysis.label] = seen.get(analysis.label, 0) + 1
        if seen[analysis.label] > 1:
            analysis.label = f"{analysis.label} ({seen[analysis.label]})"
    written = write_outputs(analyses, args)
    if args.json is not None:
        written.append(write_json(args.json, analyses, args))
    print(Path(written[0]).read_text())
    print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
