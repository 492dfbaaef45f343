"""Blockwise self-attention equals full attention under a block-diagonal mask."""

from __future__ import annotations

import argparse

import pytest
import torch
from fairseq.models.transformer import base_architecture
from fairseq.modules import MultiheadAttention, TransformerEncoderLayer
from torch import Tensor, nn

from relu_former.pyramidion.blockwise import (
    apply_blockwise,
    merge_blocks,
    split_into_blocks,
)


# Test-only (the models call ``apply_blockwise`` on whole layers): a self-attention wrapped to
# attend within blocks, the smallest user of the blockwise functions.
class BlockwiseSelfAttention(nn.Module):
    """Wrap a fairseq-style self-attention module so that it attends within blocks only.

    ``attention(query, key, value, key_padding_mask=..., need_weights=False)`` must return
    ``(output, weights)`` with ``output`` shaped like ``query`` ([T, B, C]), as fairseq's
    ``MultiheadAttention`` and the plugin's ``ActivationMultiheadAttention`` do.
    """

    def __init__(self, attention: nn.Module, block_size: int) -> None:
        super().__init__()
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.attention = attention
        self.block_size = block_size

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        def attend(states: Tensor, mask: Tensor | None) -> Tensor:
            out, _ = self.attention(
                query=states, key=states, value=states, key_padding_mask=mask,
                need_weights=False,
            )
            return out

        return apply_blockwise(attend, x, key_padding_mask, self.block_size)


def block_diagonal_mask(length: int, block_size: int) -> torch.Tensor:
    """True where query i may NOT see key j: different blocks."""
    block = torch.arange(length) // block_size
    return block[:, None] != block[None, :]


def right_padding(lengths, total: int) -> torch.Tensor:
    return torch.arange(total)[None, :] >= torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("length,block_size", [(1, 4), (7, 4), (8, 4), (13, 5), (3, 8)])
def test_split_then_merge_is_identity(length, block_size):
    x = torch.randn(length, 3, 6)
    mask = right_padding([length, max(1, length - 2), 1], length)
    folded, folded_mask = split_into_blocks(x, mask, block_size)
    blocks = -(-length // block_size)
    assert folded.shape == (block_size, 3 * blocks, 6)
    assert torch.equal(merge_blocks(folded, length, 3), x)
    if folded_mask is not None:
        # a block that has a real token keeps the padding of its positions exactly
        real_rows = ~folded_mask.all(dim=1)
        padded = torch.nn.functional.pad(mask, (0, blocks * block_size - length), value=True)
        expect = padded.reshape(3 * blocks, block_size)
        keep = ~expect.all(dim=1)
        assert torch.equal(folded_mask[keep], expect[keep])
        assert real_rows.all()


@pytest.mark.parametrize("block_size", [2, 3, 4, 16])
def test_blockwise_attention_equals_masked_full_attention(block_size):
    torch.manual_seed(0)
    length, batch, dim = 11, 3, 8
    attn = MultiheadAttention(dim, 2, self_attention=True).double().eval()
    x = torch.randn(length, batch, dim, dtype=torch.float64)
    lengths = [11, 6, 1]
    mask = right_padding(lengths, length)
    out = BlockwiseSelfAttention(attn, block_size)(x, key_padding_mask=mask)
    expect, _ = attn(x, x, x, key_padding_mask=mask, need_weights=False,
                     attn_mask=block_diagonal_mask(length, block_size))
    assert out.shape == x.shape
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[:n, b], expect[:n, b], rtol=1e-10, atol=1e-10)
    # fully padded blocks are given a valid mask: outputs stay finite everywhere
    assert torch.isfinite(out).all()


def tiny_layer_args(**overrides) -> argparse.Namespace:
    args = argparse.Namespace(encoder_embed_dim=8, encoder_ffn_embed_dim=16,
                              encoder_attention_heads=2, dropout=0.0, **overrides)
    base_architecture(args)
    return args


def test_whole_encoder_layer_runs_blockwise():
    """The layer's other parts are position-wise, so folding blocks into the batch is exact."""
    torch.manual_seed(1)
    layer = TransformerEncoderLayer(tiny_layer_args()).double().eval()
    length, block_size = 10, 4
    x = torch.randn(length, 2, 8, dtype=torch.float64)
    mask = right_padding([10, 7], length)

    def run(states, states_mask):
        return layer(states, encoder_padding_mask=states_mask)

    out = apply_blockwise(run, x, mask, block_size)
    expect = layer(x, encoder_padding_mask=mask,
                   attn_mask=block_diagonal_mask(length, block_size))
    torch.testing.assert_close(out[:, 0], expect[:, 0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out[:7, 1], expect[:7, 1], rtol=1e-10, atol=1e-10)


def test_short_input_or_block_zero_is_full_attention():
    torch.manual_seed(2)
    attn = MultiheadAttention(8, 2, self_attention=True).double().eval()
    x = torch.randn(5, 2, 8, dtype=torch.float64)

    def run(states, states_mask):
        return attn(states, states, states, key_padding_mask=states_mask, need_weights=False)[0]

    full = run(x, None)
    torch.testing.assert_close(apply_blockwise(run, x, None, 0), full)
    torch.testing.assert_close(apply_blockwise(run, x, None, 5), full)
    assert not torch.allclose(apply_blockwise(run, x, None, 2), full)


def test_gradients_flow_through_blocks():
    attn = MultiheadAttention(8, 2, self_attention=True).double()
    x = torch.randn(9, 2, 8, dtype=torch.float64, requires_grad=True)
    mask = right_padding([9, 5], 9)
    out = BlockwiseSelfAttention(attn, 4)(x, key_padding_mask=mask)
    out[:5].sum().backward()
    assert torch.isfinite(x.grad).all()
    # block 0 (positions 0-3) cannot influence block 1 (positions 4-7)
    x2 = x.detach().clone().requires_grad_(True)
    BlockwiseSelfAttention(attn, 4)(x2)[4:8].sum().backward()
    assert torch.count_nonzero(x2.grad[:4]) == 0
    assert torch.count_nonzero(x2.grad[4:8]) > 0
