"""``fairseq-interactive`` survives an input line longer than the model takes (fairseq ended
the session): truncated (``--truncate-source``) or skipped with a warning; a leading byte-order
mark is removed. No probe: it needs a model and a task."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Callable, Iterator

import torch

from relu_former.fairseq_fixes import wrap_once

logger = logging.getLogger(__name__)


def source_limit(max_positions) -> int | None:
    """The source side of fairseq's resolved ``max_positions`` (an int, a pair, or None)."""
    if isinstance(max_positions, (tuple, list)):
        max_positions = max_positions[0] if max_positions else None
    return max_positions if isinstance(max_positions, int) else None


def truncate_source(tokens: torch.Tensor, limit: int, eos: int) -> torch.Tensor:
    """The first ``limit - 1`` tokens of a source line followed by ``eos``."""
    return torch.cat([tokens[: limit - 1], tokens.new_tensor([eos])])


def strip_byte_order_mark(line: str) -> str:
    """``line`` without the byte-order marks it starts with (U+FEFF, as decoded UTF-8)."""
    return line.lstrip("\ufeff")


def bound_make_batches(make_batches: Callable) -> Callable:
    """``make_batches`` of fairseq-interactive, skipping or truncating over-long lines."""
    # lines of earlier buffers (the S- number of this buffer's first line), per main() call
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

        def bounded_tokens(lines_, encode_fn_):
            tokens, lengths = encode(task, lines_, encode_fn_)
            for i in [i for i, length in enumerate(lengths) if length > limit]:
                where = (f"input line {first_id + i} has {lengths[i]} source tokens (end of "
                         f"sentence included), more than the model's {limit} "
                         "(--max-source-positions)")
                if truncate:
                    tokens[i] = truncate_source(tokens[i], limit, task.source_dictionary.eos())
                    lengths[i] = limit
                    logger.warning(f"{where}: translating its first {limit - 1} tokens "
                                   "(--truncate-source)")
                else:
                    logger.warning(f"{where}: skipped; pass --truncate-source to translate "
                                   "its beginning instead")
            return tokens, lengths

        # fairseq's size filter drops them (not raise): the other lines keep their numbers
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
    for name in ("fairseq_cli.interactive", "__main__"):  # or run as python -m
        module = sys.modules.get(name)
        if module and getattr(module.__spec__, "name", name) == "fairseq_cli.interactive":
            wrap_once(module, "make_batches", bound_make_batches)
