"""FFN as key-value memory (docs/design.md, "Memory FFN"): relu, softmax and softmax_ln variants."""

import argparse

import pytest
import torch
import torch.nn.functional as F
from fairseq.models.transformer import TransformerConfig

from relu_former.relu_attention.memory_ffn import (
    MemoryOutput,
    build_memory_fc2,
    check_ffn_activation,
    memory_activation,
    softmax_over_slots,
)
from relu_former.relu_attention.model import ReLUFormerDecoderLayer, ReLUFormerEncoderLayer


def test_relu_keeps_the_stock_activation_and_softmax_replaces_it():
    assert memory_activation("stock", F.gelu) is F.gelu
    assert memory_activation("relu", F.gelu) is F.gelu  # the deprecated name of stock
    assert memory_activation("softmax", F.relu) is softmax_over_slots
    assert memory_activation("softmax_ln", F.relu) is softmax_over_slots


def test_softmax_over_slots_is_a_distribution_computed_in_float32():
    x = (torch.randn(3, 5, 64) * 30).to(torch.bfloat16)
    y = softmax_over_slots(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1).bfloat16().float())
    torch.testing.assert_close(y.float().sum(-1), torch.ones(3, 5), atol=1e-2, rtol=0)


def test_softmax_ln_output_is_layer_normalised_fc2():
    torch.manual_seed(0)
    fc2 = build_memory_fc2("softmax_ln", 32, 16, 0.0, 8)
    assert isinstance(fc2, MemoryOutput) and fc2.weight.shape == (16, 32)
    x = torch.randn(4, 32)
    expected = F.layer_norm(x @ fc2.weight.T + fc2.bias, (16,))
    torch.testing.assert_close(fc2(x), expected, rtol=1e-5, atol=1e-5)
    assert type(build_memory_fc2("softmax", 32, 16, 0.0, 8)) is torch.nn.Linear


def layer_cfg(ffn_activation):
    args = argparse.Namespace(
        encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=2,
        decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_attention_heads=2,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, activation_fn="relu",
        ffn_activation=ffn_activation, attention_activation="relu",
    )
    return TransformerConfig.from_namespace(args)


@pytest.mark.parametrize("variant", ["stock", "softmax", "softmax_ln"])
@pytest.mark.parametrize("layer_class", [ReLUFormerEncoderLayer, ReLUFormerDecoderLayer])
def test_layers_compute_the_variant(variant, layer_class):
    torch.manual_seed(0)
    layer = layer_class(layer_cfg(variant)).eval()
    x = torch.randn(5, 2, 16)
    hidden = layer.fc1(x)
    hidden = torch.relu(hidden) if variant == "stock" else torch.softmax(hidden, -1)
    expected = hidden @ layer.fc2.weight.T + layer.fc2.bias
    if variant == "softmax_ln":
        expected = F.layer_norm(expected, (16,))
    got = layer.fc2(layer.activation_dropout_module(layer.activation_fn(layer.fc1(x))))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_unknown_variant_names_the_flag():
    with pytest.raises(ValueError, match="--ffn-activation 'gelu' is unknown"):
        check_ffn_activation("gelu")
