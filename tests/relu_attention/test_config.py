"""config.py: one default per setting, one check per flag, the deprecated spellings."""

import argparse

import pytest
import torch
import torch.nn.functional as F

from relu_former.errors import OptionError
from relu_former.relu_attention import config
from relu_former.relu_attention.config import AttentionSettings, fill_arch_defaults
from relu_former.relu_attention.memory_ffn import check_ffn_activation


def test_settings_defaults_are_the_architectures_defaults():
    """An empty config and the arch's filled-in args give the same settings (cross included)."""
    args = argparse.Namespace()
    fill_arch_defaults(args)
    assert AttentionSettings.from_cfg(args) == AttentionSettings() == AttentionSettings.from_cfg(
        argparse.Namespace())
    assert AttentionSettings().cross_attention_activation == (
        config.DEFAULT_CROSS_ATTENTION_ACTIVATION)


def test_one_shared_activation_sets_all_three_kinds():
    settings = AttentionSettings.from_cfg(argparse.Namespace(attention_activation="relu"))
    assert {settings.activation(kind) for kind in config.ATTENTION_KINDS} == {"relu"}


@pytest.mark.parametrize("legacy, backend", [("fused", "auto"), ("reference", "reference")])
def test_deprecated_attention_kernel_is_read_as_the_backend(legacy, backend, caplog):
    args = argparse.Namespace(attention_kernel=legacy, attention_key_chunk_size=512)
    settings = AttentionSettings.from_cfg(args)
    assert settings.attention_backend == backend and "deprecated" in caplog.text
    # fused never read the chunk size: dropped; the reference path used it: kept
    assert settings.attention_key_chunk_size == (0 if legacy == "fused" else 512)


@pytest.mark.parametrize("values, flag", [
    (dict(attention_key_chunk_size=64), "--attention-key-chunk-size"),
    (dict(attention_backend="tiled", attention_key_chunk_size=64), "--attention-key-chunk-size"),
    (dict(attention_backend="gpu"), "--attention-backend"),
    (dict(relu_gamma=float("nan")), "--relu-gamma"),
    (dict(ffn_activation="gelu"), "--ffn-activation"),
    (dict(attention_kernel="cuda"), "--attention-kernel"),
])
def test_bad_settings_raise_an_option_error_naming_the_flag(values, flag):
    with pytest.raises(OptionError) as caught:
        AttentionSettings.from_cfg(argparse.Namespace(**values))
    assert caught.value.flag == flag


def test_check_ffn_activation_raises_the_option_error():
    with pytest.raises(OptionError) as caught:
        check_ffn_activation("gelu")
    assert caught.value.flag == "--ffn-activation"


@pytest.mark.parametrize("ffn_activation", ["relu", "stock"])
def test_deprecated_ffn_activation_relu_is_the_stock_ffn(ffn_activation):
    """``--ffn-activation relu`` always meant the layer's own ``--activation-fn`` (gelu here),
    not a ReLU: the layer's FFN is fc2(gelu(fc1(x))), with a plain Linear fc2."""
    from fairseq.models.transformer import TransformerConfig

    from relu_former.relu_attention.model import ReLUFormerEncoderLayer

    torch.manual_seed(0)
    cfg = TransformerConfig.from_namespace(argparse.Namespace(
        encoder_embed_dim=8, encoder_ffn_embed_dim=16, encoder_attention_heads=2, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, activation_fn="gelu",
        ffn_activation=ffn_activation))
    layer = ReLUFormerEncoderLayer(cfg).double().eval()
    x = torch.randn(4, 8, dtype=torch.float64)
    expected = F.linear(F.gelu(F.linear(x, layer.fc1.weight, layer.fc1.bias)),
                        layer.fc2.weight, layer.fc2.bias)
    assert type(layer.fc2) is torch.nn.Linear
    torch.testing.assert_close(layer.fc2(layer.activation_fn(layer.fc1(x))), expected)
