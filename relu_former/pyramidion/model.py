"""Transpooler and Pyramidion: transformer encoders that shorten long inputs by pooling.

The encoder is fairseq's, run layer by layer; after the layers that ``--pooling-schedule``
names, a :class:`~relu_former.pyramidion.pooling.TokenPooler` keeps a soft top-k of the states
(successive halving, Pietruszka et al. 2022). A Transpooler pools once, after the last layer; a
Pyramidion pools after several layers, so deeper layers and the decoder's cross-attention
work on ever shorter sequences. Encoder layers optionally attend within blocks
(``--attention-block-size``). With pooling off the same model is the vanilla (full
attention) or blockwise baseline, and a checkpoint keeps working when only the block size
changes, since blocks add no parameters.

``--pooling-schedule`` takes either

- ``LAYER:LENGTH[,LAYER:LENGTH...]``: after encoder layer ``LAYER`` (1-based; ``last`` or a
  negative number counts from the end) pool to ``LENGTH`` states, e.g. ``2:4096,3:2048`` or
  ``last:2048``; on the command line a negative layer needs the ``=`` form
  (``--pooling-schedule=-1:2048``), since argparse takes ``-1:2048`` for an option; or
- one length per encoder layer, e.g. ``8192,4096,2048`` for 3 layers: after layer i pool to
  the i-th length when it differs from the previous entry (the first always applies).

Lengths must shrink along the layers. A sentence shorter than a length is not pooled
further (it keeps ``min(length, T)`` slots), and the pooled padding mask goes to the decoder,
whose beam search reorders the pooled states with fairseq's ``reorder_encoder_out``.
"""

from __future__ import annotations

import logging
import weakref
from typing import Dict, List

import torch
from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, TransformerConfig
from torch import Tensor, nn

from relu_former.errors import OptionError
from relu_former.flag_types import float_above, int_at_least
from relu_former.pyramidion.blockwise import apply_blockwise
from relu_former.pyramidion.pooling import SCORERS, TokenPooler
from relu_former.relu_attention.model import (
    ReLUFormerDecoder,
    ReLUFormerEncoder,
    ReLUFormerModel,
    relu_former_architecture,
)

logger = logging.getLogger(__name__)

SCHEDULE_FLAG = "--pooling-schedule"
_NO_POOLING = ("none", "off")
_FORMS = ("LAYER:LENGTH pairs such as '2:4096,3:2048' or 'last:2048', one length per encoder "
          "layer such as '8192,8192,4096', or 'none'")


def _schedule_int(text: str, spec: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise OptionError(
            SCHEDULE_FLAG, f"{spec!r}: {text!r} is not an integer; write {_FORMS}"
        ) from None


def _layer_number(text: str, spec: str, num_layers: int) -> int:
    """1-based layer of ``LAYER`` in ``LAYER:LENGTH`` (``last`` and negatives from the end)."""
    text = text.strip().lower()
    layer = -1 if text == "last" else _schedule_int(text, spec)
    if not -num_layers <= layer <= num_layers or layer == 0:
        raise OptionError(
            SCHEDULE_FLAG,
            f"{spec!r}: layer {layer} does not exist; the encoder has {num_layers} layers "
            f"(use 1..{num_layers}, 'last', or -1..-{num_layers} counting from the end)",
        )
    return layer if layer > 0 else num_layers + 1 + layer


def _schedule_from_pairs(items: List[str], spec: str, num_layers: int) -> Dict[int, int]:
    schedule: Dict[int, int] = {}
    for item in items:
        layer_text, length_text = item.split(":", 1)
        layer = _layer_number(layer_text, spec, num_layers)
        if layer in schedule:
            raise OptionError(SCHEDULE_FLAG, f"{spec!r}: layer {layer} appears twice")
        schedule[layer] = _schedule_int(length_text.strip(), spec)
    return schedule


def _schedule_from_lengths(items: List[str], spec: str, num_layers: int) -> Dict[int, int]:
    lengths = [_schedule_int(item, spec) for item in items]
    if len(lengths) != num_layers:
        raise OptionError(
            SCHEDULE_FLAG,
            f"{spec!r} gives {len(lengths)} lengths but the encoder has {num_layers} layers "
            "(--encoder-layers); give one length per layer or LAYER:LENGTH pairs",
        )
    # pool after a layer whose entry differs from the previous one (a longer entry is kept
    # so that the shrink check below reports it)
    return {layer: length for layer, length in enumerate(lengths, start=1)
            if layer == 1 or length != lengths[layer - 2]}


def _check_lengths_shrink(schedule: Dict[int, int], spec: str) -> None:
    previous_layer, previous_length = None, None
    for layer in sorted(schedule):
        length = schedule[layer]
        if length <= 0:
            raise OptionError(
                SCHEDULE_FLAG,
                f"{spec!r}: layer {layer} pools to {length} states; lengths (k) must be positive",
            )
        if previous_length is not None and length >= previous_length:
            raise OptionError(
                SCHEDULE_FLAG,
                f"{spec!r} lengthens: layer {layer} pools to {length} after layer "
                f"{previous_layer} pooled to {previous_length}; lengths must shrink from "
                "layer to layer",
            )
        previous_layer, previous_length = layer, length


def parse_pooling_schedule(spec: str | None, num_layers: int) -> Dict[int, int]:
    """Map ``--pooling-schedule`` to ``{layer (1-based): pooled length}``; ``{}`` = no pooling.

    ``None`` (the flag not given and no arch default) and ``'none'``/``'off'`` mean no
    pooling; see the module docstring for the two forms. Anything else that is not a valid
    schedule, an empty string included, raises :class:`OptionError` naming the flag.
    """
    if spec is None:
        return {}
    text = spec.strip()
    if not text:
        raise OptionError(SCHEDULE_FLAG, f"is empty; write {_FORMS}")
    if text.lower() in _NO_POOLING:
        return {}
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise OptionError(SCHEDULE_FLAG, f"{spec!r} has an empty entry")
    with_layer = [":" in item for item in items]
    if all(with_layer):
        schedule = _schedule_from_pairs(items, spec, num_layers)
    elif not any(with_layer):
        schedule = _schedule_from_lengths(items, spec, num_layers)
    else:
        raise OptionError(
            SCHEDULE_FLAG, f"{spec!r} mixes LAYER:LENGTH pairs and plain lengths; use one form"
        )
    _check_lengths_shrink(schedule, spec)
    return schedule


def check_schedule_pools(schedule: Dict[int, int], spec: str, max_source_positions: int) -> None:
    """Refuse a schedule whose every length keeps all states of the longest input.

    Successive halving keeps ``min(k, n)`` states, so such a model would train without any
    pooling (silently the vanilla or blockwise baseline).
    """
    if not schedule:
        return
    shortest = min(schedule.values())
    if shortest >= max_source_positions:
        raise OptionError(
            SCHEDULE_FLAG,
            f"{spec!r} pools to {shortest} states at the least, but --max-source-positions is "
            f"{max_source_positions}: no input is long enough to be pooled, so the model would "
            "train without pooling. Raise --max-source-positions above that length, give "
            "shorter lengths, or write 'none' for no pooling",
        )


class PyramidionEncoder(ReLUFormerEncoder):
    """The ReLUFormer encoder (fairseq's, with ``--attention-activation``) that also pools.

    ``cfg`` is a ``TransformerConfig`` carrying the extra fields ``pooling_schedule``,
    ``pooling_scorer``, ``pooling_base``, ``pooling_temperature``, ``no_pooling_sort``,
    ``pooling_order`` and ``attention_block_size`` (fairseq copies every flag onto it).
    """

    def __init__(self, cfg, dictionary, embed_tokens, return_fc: bool = False) -> None:
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.pooling_schedule = parse_pooling_schedule(
            getattr(cfg, "pooling_schedule", None), len(self.layers)
        )
        if self.pooling_schedule and self.encoder_layerdrop > 0:
            raise OptionError(
                "--encoder-layerdrop",
                "--encoder-layerdrop drops layers at random, so a --pooling-schedule could "
                "not say after which layer to pool; set one of them to 0/none"
            )
        self.block_size = int(getattr(cfg, "attention_block_size", 0) or 0)
        if self.block_size < 0:
            raise OptionError(
                "--attention-block-size",
                f"must be >= 0 (0 = full attention), got {self.block_size}",
            )
        self.poolers = nn.ModuleDict({
            str(layer): TokenPooler(
                embed_tokens.embedding_dim,
                scorer=getattr(cfg, "pooling_scorer", "linear"),
                base=getattr(cfg, "pooling_base", 20.0),
                temperature=getattr(cfg, "pooling_temperature", None),
                sort=not getattr(cfg, "no_pooling_sort", False),
                keep_order=getattr(cfg, "pooling_order", "original") == "original",
            )
            for layer in self.pooling_schedule
        })

    def _run_layer(self, layer: nn.Module, x: Tensor, mask: Tensor | None) -> Tensor:
        def run(states: Tensor, states_mask: Tensor | None) -> Tensor:
            out = layer(states, encoder_padding_mask=states_mask)
            return out[0] if isinstance(out, tuple) else out

        return apply_blockwise(run, x, mask, self.block_size)

    def forward_scriptable(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor | None = None,
        return_all_hiddens: bool = False,
        token_embeddings: Tensor | None = None,
    ) -> Dict[str, List[Tensor]]:
        if src_tokens.size(1) > self.max_positions():
            raise ValueError(
                f"a source of {src_tokens.size(1)} tokens is longer than "
                f"--max-source-positions {self.max_positions()}; pass --truncate-source to "
                "cut long inputs or raise --max-source-positions"
            )
        padding_mask = src_tokens.eq(self.padding_idx)
        # where each source position (as the caller padded it) ends up in the output, with
        # its weight there: what maps attention over the output back to the source tokens
        source_weight = ~padding_mask  # bool until a pooling layer gives weights
        source_slot = torch.arange(src_tokens.size(1), device=src_tokens.device).expand_as(
            src_tokens)
        if padding_mask[:, 0].any():
            if token_embeddings is not None:
                raise ValueError("token_embeddings are supported for right-padded sources only")
            # Blocks and the operator's ties are counted from position 0: right-padding
            # makes a left-padded batch give exactly the states of its right-padded twin.
            src_tokens = utils.convert_padding_direction(
                src_tokens, self.padding_idx, left_to_right=True
            )
            # that rotates each row left by its padding count
            source_slot = (source_slot - padding_mask.sum(dim=1, keepdim=True)) % src_tokens.size(1)
            padding_mask = src_tokens.eq(self.padding_idx)
        x, embedding = self.forward_embedding(src_tokens, token_embeddings)
        x = (x * (~padding_mask).unsqueeze(-1).type_as(x)).transpose(0, 1)
        mask: Tensor | None = padding_mask if bool(padding_mask.any()) else None

        states = [x] if return_all_hiddens else []
        for index, layer in enumerate(self.layers, start=1):
            x = self._run_layer(layer, x, mask)
            if index in self.pooling_schedule:
                x, mask, (slot, weight) = self.poolers[str(index)](
                    x, mask, self.pooling_schedule[index])
                source_weight = weight.gather(1, source_slot) * source_weight
                source_slot = slot.gather(1, source_slot)
            if return_all_hiddens:
                states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if mask is None:
            mask = x.new_zeros(x.size(1), x.size(0), dtype=torch.bool)
        lengths = (~padding_mask).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T' x B x C, T' = pooled length
            "encoder_padding_mask": [mask],  # B x T'
            "encoder_embedding": [embedding],  # B x T x C (before pooling)
            "encoder_states": states,
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [lengths],
            "source_slot": [source_slot],  # B x T (T as the caller padded the source)
            "source_weight": [source_weight.to(x.dtype)],  # B x T
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor
                            ) -> Dict[str, List[Tensor]]:
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key in ("source_slot", "source_weight"):
            reordered[key] = [t.index_select(0, new_order) for t in encoder_out.get(key, [])]
        return reordered


class PyramidionDecoder(ReLUFormerDecoder):
    """The ReLUFormer decoder, whose returned attention is over the source tokens.

    The encoder output is pooled, so the cross-attention weights are over pooled slots; each
    slot is a weighted sum of source positions (a partition of them), so the weight of source
    position i is the attention on its slot times its weight in that slot. Rows still sum to 1,
    padding gets 0, and ``fairseq-generate --print-alignment`` (and anything else reading
    ``extra["attn"]``) indexes the source as it was given, left padding included.
    """

    def extract_features(self, prev_output_tokens, encoder_out=None, *args, **kwargs):
        x, extra = super().extract_features(prev_output_tokens, encoder_out, *args, **kwargs)
        attn = extra["attn"][0] if extra.get("attn") else None
        if attn is not None and encoder_out and encoder_out.get("source_slot"):
            slot, weight = encoder_out["source_slot"][0], encoder_out["source_weight"][0]
            index = slot.unsqueeze(1).expand(-1, attn.size(1), -1)
            extra["attn"] = [attn.gather(2, index) * weight.unsqueeze(1).to(attn.dtype)]
        return x, extra


def warn_if_never_pooled(schedule: Dict[int, int], spec: str, longest: int, split: str) -> bool:
    """Warn (one log line) about the layers of ``schedule`` that keep every state of a
    ``longest``-token source, so never pool on this data; True when it warned.

    A warning, not an error: the schedule is the model's (a preset's 4096/2048 is sized for
    long documents), and the same model pools as soon as it gets longer inputs.
    """
    never = [layer for layer in sorted(schedule) if schedule[layer] >= longest]
    if not never:
        return False
    layers = ", ".join(f"layer {layer} (to {schedule[layer]})" for layer in never)
    if len(never) == len(schedule):
        outcome = "the model trains without pooling, as the unpooled baseline"
    else:
        outcome = "only " + ", ".join(f"layer {layer} (to {schedule[layer]})"
                                      for layer in sorted(schedule) if layer not in never)
        outcome += " pools"
    logger.warning(
        "%s %r: the longest source of split %r has %d tokens, so %s never pool%s: %s. "
        "Lengths below %d pool; write 'none' to train without pooling on purpose",
        SCHEDULE_FLAG, spec, split, longest, layers, "s" if len(never) == 1 else "", outcome,
        longest)
    return True


class SourceLengthCheck:
    """Refuse training sources longer than --max-source-positions, naming the flags; warn
    once when --pooling-schedule never pools the training data.

    fairseq-train silently skips training sentences longer than the model's limit (valid and
    test sentences raise an error that names --skip-invalid-size-inputs-valid-test); for
    long-document models that can drop most of a corpus. fairseq asks the model for
    ``max_positions()`` right after it loads the training split and before it batches it,
    so that is where the split's sizes are checked, once per loaded dataset.
    """

    def __init__(self, args, task, schedule: Dict[int, int] | None = None) -> None:
        self.schedule = schedule or {}
        self.spec = getattr(args, "pooling_schedule", None)
        self.warned = False
        self.task = weakref.ref(task) if task is not None else None
        self.split = getattr(args, "train_subset", None) or "train"
        self.truncate = bool(getattr(args, "truncate_source", False)) or bool(
            getattr(getattr(task, "cfg", None), "truncate_source", False)
        )
        # The split checked last, held weakly: an id() could be reused by a reloaded split.
        self.checked: weakref.ref | None = None

    def __call__(self, limit: int) -> None:
        task = self.task() if self.task is not None else None
        datasets = getattr(task, "datasets", None)
        if not isinstance(datasets, dict):
            return
        dataset = datasets.get(self.split)
        sizes = getattr(dataset, "src_sizes", None)
        if sizes is None or len(sizes) == 0:
            return
        if self.checked is not None and self.checked() is dataset:
            return
        longest = int(max(sizes))  # truncated sources are counted truncated
        if longest > limit and not self.truncate:
            raise OptionError(
                "--max-source-positions",
                f"split {self.split!r} has a source of {longest} tokens, longer than "
                f"--max-source-positions {limit}: pass --truncate-source to cut sources to "
                f"that length, or raise --max-source-positions to at least {longest} "
                "(fairseq-train would silently skip those sentences)"
            )
        if not self.warned:
            self.warned = warn_if_never_pooled(self.schedule, self.spec, min(longest, limit),
                                               self.split)
        self.checked = weakref.ref(dataset)


def real_source_positions(args) -> int:
    """The longest source the encoder can get: ``--max-source-positions``, or fairseq's
    default (1024) that ``TransformerModel.build_model`` fills in when it is not typed.

    Training shares the flag with the translation task, so its data limit is the same number;
    at generation the model's own (saved) limit counts, whatever the task's.
    """
    return getattr(args, "max_source_positions", None) or DEFAULT_MAX_SOURCE_POSITIONS


@register_model("pyramidion")
class PyramidionModel(ReLUFormerModel):
    """Encoder-decoder transformer whose encoder pools (Transpooler/Pyramidion).

    It is a ``relu_former`` model, so ``--attention-activation relu`` (and the other ReLU
    attention and FFN flags) apply; the pyramidion architectures default to softmax.
    """

    decoder_class = PyramidionDecoder

    @classmethod
    def add_args(cls, parser) -> None:
        super().add_args(parser)
        parser.add_argument(
            "--pooling-schedule", type=str, metavar="SPEC",
            help="where and how far the encoder pools: LAYER:LENGTH pairs ('2:4096,3:2048', "
                 "'last:2048'; a negative LAYER counts from the end and needs the = form, "
                 "--pooling-schedule=-1:2048) or one length per layer ('8192,8192,4096'); "
                 "'none' turns pooling off (vanilla or blockwise baseline); default per --arch",
        )
        parser.add_argument(
            "--pooling-scorer", choices=sorted(SCORERS), metavar="NAME",
            help=f"token scorer for pooling: {', '.join(SCORERS)} (default linear)",
        )
        parser.add_argument(
            "--pooling-base", type=float_above("--pooling-base", 1, " (published: 20)"),
            metavar="B",
            help="successive halving weighs a pair by softmax(B ** score); larger is harder "
                 "(default 20, as published)",
        )
        parser.add_argument(
            "--pooling-temperature", type=float_above("--pooling-temperature", 0),
            metavar="T",
            help="weigh a pair by softmax(score / T) instead of by --pooling-base",
        )
        parser.add_argument(
            "--no-pooling-sort", action="store_true", default=None,
            help="pair tokens by position instead of by score rank (the paper's ablation: "
                 "faster, less accurate top-k)",
        )
        parser.add_argument(
            "--pooling-order", choices=["original", "score"],
            help="order of the pooled states: their original order (default) or by score",
        )
        parser.add_argument(
            "--attention-block-size",
            type=int_at_least("--attention-block-size", 0, " (0 = full attention)"), metavar="N",
            help="encoder tokens attend within blocks of N tokens (e.g. 128, 512); "
                 "0 = full attention (default 512 in every pyramidion arch, as in the paper)",
        )

    @classmethod
    def build_model(cls, args, task):
        pyramidion_base(args)
        # fail before any data is loaded
        schedule = parse_pooling_schedule(args.pooling_schedule, args.encoder_layers)
        # typed or not: an untyped --max-source-positions is fairseq's default, which
        # TransformerModel.build_model fills in below, and inputs are never longer than that
        check_schedule_pools(schedule, args.pooling_schedule, real_source_positions(args))
        model = super().build_model(args, task)
        model.source_length_check = SourceLengthCheck(args, task, schedule)
        return model

    def max_positions(self):
        positions = super().max_positions()
        check = getattr(self, "source_length_check", None)
        if check is not None:
            check(self.encoder.max_positions())
        return positions

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return PyramidionEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)


def _default(args, name: str, value) -> None:
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def _pooling_defaults(args, schedule: str, block_size: int) -> None:
    """Fill the flags left unset; then the relu_former (and transformer) defaults."""
    _default(args, "pooling_schedule", schedule)
    _default(args, "pooling_scorer", "linear")
    _default(args, "pooling_base", 20.0)
    _default(args, "no_pooling_sort", False)
    _default(args, "pooling_order", "original")
    _default(args, "attention_block_size", block_size)
    _default(args, "attention_activation", "softmax")  # the paper's models use softmax
    relu_former_architecture(args)


# The presets follow the paper (Pietruszka et al., 2022): pooling right after the first
# encoder layer was clearly worse there, and every encoder attends within blocks of 512 tokens
# (a no-op for sequences of 512 tokens or fewer). docs/pyramidion.md says which of the paper's
# models each one is.


@register_model_architecture("pyramidion", "pyramidion")
def pyramidion_base(args) -> None:
    """3 + 3 layers, blocks of 512; 8192 -> 4096 after layer 2 -> 2048 after layer 3."""
    _default(args, "encoder_layers", 3)
    _default(args, "decoder_layers", 3)
    _pooling_defaults(args, "2:4096,3:2048", 512)


register_model_architecture("pyramidion", "pyramidion_base")(pyramidion_base)


@register_model_architecture("pyramidion", "transpooler_base")
def transpooler_base(args) -> None:
    """6 + 6 layers, blocks of 512, pooling once, after the last encoder layer, to 2048.
    Ours: a base-sized Transpooler for 8192-token inputs; the paper's Transpooler
    experiments use the 4-layer transpooler_4x."""
    _pooling_defaults(args, "last:2048", 512)


@register_model_architecture("pyramidion", "transpooler_4x")
def transpooler_4x(args) -> None:
    """The paper's Transpooler (its table 4): 4 encoder layers, pooling once after the last
    to a quarter of --max-source-positions (8192 -> 2048 at the paper's input length);
    blocks of 512. Not published: the decoder depth (4 here, as the encoder)."""
    _default(args, "encoder_layers", 4)
    _default(args, "decoder_layers", 4)
    _default(args, "max_source_positions", 8192)
    _pooling_defaults(args, f"last:{max(1, args.max_source_positions // 4)}", 512)


@register_model_architecture("pyramidion", "deep_pyramidion")
def deep_pyramidion(args) -> None:
    """6 + 6 layers, blocks of 512, 8192 -> 4096 after layer 2 -> 2048 after layer 4.
    Schedule not published: the paper names DeepPyramidion's scores, not its pooling
    schedule; this one is ours."""
    _pooling_defaults(args, "2:4096,4:2048", 512)


@register_model_architecture("pyramidion", "vanilla_full_attention_8k")
def vanilla_full_attention_8k(args) -> None:
    """The paper's vanilla comparison model (#3): full attention over the whole input (8192
    tokens with --max-source-positions 8192), no pooling. Depth not published: 2 + 2
    layers, the authors' fairseq fork's default, and the encoder depth that gives the
    paper's 13x encoder factor against Pyramidion #13 (2 x 8192^2 / (2 x 8192 x 512 + 4096
    x 512) = 12.8)."""
    _default(args, "encoder_layers", 2)
    _default(args, "decoder_layers", 2)
    _default(args, "max_source_positions", 8192)
    _pooling_defaults(args, "none", 0)


@register_model_architecture("pyramidion", "blockwise_transformer_base")
def blockwise_transformer_base(args) -> None:
    """The blockwise baseline: 6 + 6 layers, blocks of 512, no pooling."""
    _pooling_defaults(args, "none", 512)
