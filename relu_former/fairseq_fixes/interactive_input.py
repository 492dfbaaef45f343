"""``fairseq-interactive`` survives an input line longer than the model accepts.

fairseq-fixed 0.12.3.1's interactive loop (as fairseq 0.12.x's) batches each buffer of input
lines with the model's maximum positions; one line longer than ``--max-source-positions``
(after tokenisation and BPE) makes the batch filter raise, and the whole session ends with a
traceback: every sentence typed or piped after it is lost. With the plugin loaded, such a line
is instead

- truncated to the source limit (its first ``limit - 1`` tokens and the end-of-sentence
  token) when ``--truncate-source`` is given, as the training data is under that flag;
- otherwise skipped: no ``H-``/``D-`` lines are printed for it;

with a warning naming the line (numbered like the ``S-`` lines, from 0), its length and the
limit, and the session goes on with the next line.

A UTF-8 byte-order mark at the start of a line (Windows editors write one at the start of
a file, and fairseq reads its input as plain UTF-8) is removed first: left in place it glues
onto the first word, which then is not in the dictionary and translates as ``<unk>``.

fairseq offers no hook here, so the plugin wraps ``fairseq_cli.interactive.make_batches`` (the
module attribute that the loop looks up for every buffer) when that module is already loaded,
i.e. when the command being run is ``fairseq-interactive``. The wrapper changes nothing for
lines within the limit, so it needs no probe (one would need a model and a task).
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Callable, Iterator

import torch

from relu_former.fairseq_fixes.wrap_once import wrap_once

logger = logging.getLogger(__name__)


def source_limit(max_positions) -> int | None:
    """The source side of fairseq's resolved ``max_positions`` (an int, a pair, or None)."""
    if isinstance(max_positions, (tuple, list)):
        max_positions = max_positions[0] if max_positions else None
    return max_positions if isinstance(max_positions, int) else None


def truncate_source(tokens: torch.Tensor, limit: int, eos: int) -> torch.Tensor:
    """The first ``limit - 1`` tokens of a source line followed by ``eos``."""
    return torch.cat([tokens[: limit - 1], tokens.new_tensor([eos])])


BYTE_ORDER_MARK = "\ufeff"


def strip_byte_order_mark(line: str) -> str:
    """``line`` without the byte-order marks it starts with (U+FEFF, as decoded UTF-8)."""
    return line.lstrip(BYTE_ORDER_MARK)


def bound_make_batches(make_batches: Callable) -> Callable:
    """``make_batches`` of fairseq-interactive, skipping or truncating over-long lines (and
    removing byte-order marks)."""
    # lines of earlier buffers (the S- number of this buffer's first line), counted per run of
    # fairseq-interactive's main(): each has a config of its own
    seen = {"cfg": None, "lines": 0}

    @functools.wraps(make_batches)
    def bounded(lines, cfg, task, max_positions, encode_fn) -> Iterator:
        lines = [strip_byte_order_mark(line) for line in lines]
        if seen["cfg"] is not cfg:
            seen.update(cfg=cfg, lines=0)
        first_id = seen["lines"]
        seen["lines"] += len(lines)
        limit = source_limit(max_positions)
        if limit is None:
            yield from make_batches(lines, cfg, task, max_positions, encode_fn)
            return
        truncate = bool(getattr(cfg.task, "truncate_source", False))
        encode = type(task).get_interactive_tokens_and_lengths
        skipped = []

        def bounded_tokens(lines_, encode_fn_):
            tokens, lengths = encode(task, lines_, encode_fn_)
            for i, length in enumerate(lengths):
                if length <= limit:
                    continue
                where = (f"input line {first_id + i} has {length} source tokens (end of "
                         f"sentence included), more than the model's {limit} "
                         "(--max-source-positions)")
                if truncate:
                    tokens[i] = truncate_source(tokens[i], limit, task.source_dictionary.eos())
                    lengths[i] = limit
                    logger.warning(f"{where}: translating its first {limit - 1} tokens "
                                   "(--truncate-source)")
                else:
                    skipped.append(i)
                    logger.warning(f"{where}: skipped; pass --truncate-source to translate "
                                   "its beginning instead")
            return tokens, lengths

        # The skipped lines are left to fairseq's own size filter, told to drop rather than
        # raise, so that the other lines keep their numbers.
        task.get_interactive_tokens_and_lengths = bounded_tokens
        dataset_cfg = cfg.dataset
        strict = dataset_cfg.skip_invalid_size_inputs_valid_test
        dataset_cfg.skip_invalid_size_inputs_valid_test = True
        try:
            yield from make_batches(lines, cfg, task, max_positions, encode_fn)
        finally:
            dataset_cfg.skip_invalid_size_inputs_valid_test = strict
            del task.get_interactive_tokens_and_lengths

    return bounded


def bound_interactive_input() -> None:
    """Install :func:`bound_make_batches` if ``fairseq_cli.interactive`` is loaded (idempotent)."""
    for name in ("fairseq_cli.interactive", "__main__"):
        module = sys.modules.get(name)
        spec = getattr(module, "__spec__", None)
        if module is None or getattr(spec, "name", name) != "fairseq_cli.interactive":
            continue
        if callable(getattr(module, "make_batches", None)):
            wrap_once(module, "make_batches", bound_make_batches)
