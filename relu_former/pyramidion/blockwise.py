"""Blockwise self-attention: tokens attend only within fixed blocks of ``block_size`` tokens.

The sequence is cut into consecutive blocks (the last one padded) and the blocks are folded
into the batch dimension, so any self-attention module -- or a whole transformer encoder
layer, whose other parts are position-wise -- runs on ``[block_size, batch * blocks, dim]``.
Cost and memory per layer fall from O(n^2) to O(n * block_size), and no parameter changes:
a checkpoint trained with full attention runs blockwise and vice versa.

Blocks are counted from the first position of the tensor, so callers that want left- and
right-padded batches to give the same result must right-pad first (the Pyramidion encoder
does).
"""

from __future__ import annotations

import math
from typing import Callable, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor


def split_into_blocks(
    x: Tensor, padding_mask: Tensor | None, block_size: int
) -> Tuple[Tensor, Tensor | None]:
    """Fold ``x`` [T, B, C] into ``[block_size, B * ceil(T / block_size), C]``; ``block_size``
    >= 1 (:func:`apply_blockwise` is the caller: it runs ``fn`` unchanged for 0).

    Returns the folded states and their key padding mask (True = padding), or ``None`` when
    no position is padding. Block ``j`` of sentence ``b`` becomes batch row ``b * blocks + j``.
    A block holding nothing but padding is given an all-False mask: attention over an
    all-masked row would be NaN, and those outputs are padding that callers ignore.
    """
    length, batch, dim = x.shape
    blocks = max(1, math.ceil(length / block_size))
    extra = blocks * block_size - length
    if extra > 0:
        x = F.pad(x, (0, 0, 0, 0, 0, extra))
        if padding_mask is None:
            padding_mask = x.new_zeros(batch, length, dtype=torch.bool)
        padding_mask = F.pad(padding_mask, (0, extra), value=True)
    folded = (
        x.view(blocks, block_size, batch, dim)
        .permute(1, 2, 0, 3)
        .reshape(block_size, batch * blocks, dim)
    )
    if padding_mask is None:
        return folded, None
    mask = padding_mask.reshape(batch * blocks, block_size)
    mask = mask & ~mask.all(dim=1, keepdim=True)
    return folded, (mask if bool(mask.any()) else None)


def merge_blocks(folded: Tensor, length: int, batch: int) -> Tensor:
    """Inverse of :func:`split_into_blocks`: ``[S, B * blocks, C]`` back to ``[length, B, C]``."""
    block_size, rows, dim = folded.shape
    blocks = rows // batch
    return (
        folded.view(block_size, batch, blocks, dim)
        .permute(2, 0, 1, 3)
        .reshape(blocks * block_size, batch, dim)[:length]
    )


def apply_blockwise(
    fn: Callable[[Tensor, Tensor | None], Tensor],
    x: Tensor,
    padding_mask: Tensor | None,
    block_size: int,
) -> Tensor:
    """Run ``fn(states, padding_mask)`` on each block of ``x`` [T, B, C] independently.

    ``fn`` must mix information across positions only through self-attention (a fairseq
    encoder layer qualifies); ``block_size <= 0`` or ``T <= block_size`` runs it unchanged.
    """
    length, batch, _ = x.shape
    if block_size <= 0 or length <= block_size:
        return fn(x, padding_mask)
    folded, mask = split_into_blocks(x, padding_mask, block_size)
    return merge_blocks(fn(folded, mask), length, batch)
