"""ActivationMultiheadAttention: fairseq compatibility, incremental decoding, statistics."""

import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention

from relu_former.relu_attention.activations import ACTIVATIONS, bind_attention
from relu_former.relu_attention.attention import ActivationMultiheadAttention

E, HEADS = 16, 2


def make(activation="relu", kind="self", **kwargs):
    role = dict(self_attention=True) if kind == "self" else dict(encoder_decoder_attention=True)
    torch.manual_seed(0)
    return ActivationMultiheadAttention(E, HEADS, activation=activation, **role, **kwargs)


def future_mask(length):
    """fairseq's decoder mask: additive float, -inf above the diagonal."""
    return torch.triu(torch.full((length, length), float("-inf")), 1)


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_softmax_equals_fairseq_stock_attention(kind):
    role = dict(self_attention=True) if kind == "self" else dict(encoder_decoder_attention=True)
    stock = MultiheadAttention(E, HEADS, **role).eval()
    ours = make("softmax", kind).eval()
    ours.load_state_dict(stock.state_dict())
    torch.manual_seed(1)
    x, memory = torch.randn(6, 3, E), torch.randn(8, 3, E)
    key = x if kind == "self" else memory
    padding = torch.zeros(3, key.size(0), dtype=torch.bool)
    padding[0, -2:] = True
    padding[2, :3] = True
    mask = future_mask(6) if kind == "self" else None
    # (the stock fused path averages the weights over heads whatever need_head_weights says)
    expected, expected_weights = stock(x, key, key, key_padding_mask=padding, attn_mask=mask)
    out, weights = ours(x, key, key, key_padding_mask=padding, attn_mask=mask)
    # Rows that see no key (left padding under the causal mask) are NaN in the stock module
    # and 0 in ours; every other row agrees.
    seen = torch.isfinite(expected).all(-1)
    assert (~seen).any() == (kind == "self")
    assert torch.isfinite(out).all() and torch.all(out[~seen] == out[~seen][:1])
    torch.testing.assert_close(out[seen], expected[seen], rtol=1e-5, atol=1e-6)
    rows = torch.isfinite(expected_weights).all(-1)
    torch.testing.assert_close(weights[rows], expected_weights[rows], rtol=1e-5, atol=1e-6)
    assert torch.all(weights[~rows] == 0)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_never_takes_the_fused_softmax_path(activation, monkeypatch):
    def fused(*args, **kwargs):
        raise AssertionError("F.multi_head_attention_forward was called")

    monkeypatch.setattr(F, "multi_head_attention_forward", fused)
    module = make(activation).train()
    x = torch.randn(5, 2, E)
    out, _ = module(x, x, x, attn_mask=future_mask(5))
    out.sum().backward()
    # and the output is the named activation's (the functional form on the same projections)
    module.eval()
    with torch.no_grad():
        q, k, v = (module._split_heads(p(x)) for p in (module.q_proj, module.k_proj,
                                                       module.v_proj))
        heads = bind_attention(activation)(q, k, v, attn_mask=torch.triu(
            torch.ones(5, 5, dtype=torch.bool), 1), **module._attention_parameters()).out
        mixed = heads.permute(2, 0, 1, 3).reshape(5, 2, E)
        if activation == "rela":
            mixed = mixed * torch.sigmoid(module.rela_gate(x))
        torch.testing.assert_close(module(x, x, x, attn_mask=future_mask(5))[0],
                                   module.out_proj(mixed), rtol=1e-5, atol=1e-6)


def relu_reference(module, x, memory, padding=None, mask=None):
    """The module's relu output from its projections and the factor's formula, in float64."""
    tgt_len, bsz, _ = x.shape
    key = x if memory is None else memory
    q = module.q_proj(x).double().view(tgt_len, bsz, HEADS, -1).permute(1, 2, 0, 3)
    k = module.k_proj(key).double().view(key.size(0), bsz, HEADS, -1).permute(1, 2, 0, 3)
    v = module.v_proj(key).double().view(key.size(0), bsz, HEADS, -1).permute(1, 2, 0, 3)
    visible = torch.ones(bsz, 1, tgt_len, key.size(0), dtype=torch.bool)
    if padding is not None:
        visible &= ~padding[:, None, None, :]
    if mask is not None:
        visible &= ~(mask < 0)
    s = torch.relu(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))) * visible
    n = visible.sum(-1, keepdim=True).clamp(min=1)
    gamma = module.gamma
    if not isinstance(gamma, float):
        gamma = gamma.double()[:, None, None]
    out = (s @ v) / (gamma * (n / 2).sqrt())
    out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, E)
    return module.out_proj(out.float())


@pytest.mark.parametrize("learn_gamma", [False, True])
def test_relu_output_matches_formula_with_fairseq_masks(learn_gamma):
    module = make("relu", relu_gamma=1.7, relu_learn_gamma=learn_gamma).eval()
    if learn_gamma:
        with torch.no_grad():
            module.log_gamma.copy_(torch.tensor([0.3, -0.2]))
    x = torch.randn(6, 3, E)
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[1, :2] = True
    out, _ = module(x, x, x, key_padding_mask=padding, attn_mask=future_mask(6))
    torch.testing.assert_close(out, relu_reference(module, x, None, padding, future_mask(6)),
                               rtol=1e-5, atol=1e-6)


def test_learned_gamma_is_a_per_head_parameter_with_gradient():
    module = make("relu", relu_gamma=2.0, relu_learn_gamma=True).double().train()
    assert module.log_gamma.shape == (HEADS,)
    torch.testing.assert_close(module.gamma, torch.full((HEADS,), 2.0, dtype=torch.float64))
    assert "log_gamma" in dict(module.named_parameters())
    x = torch.randn(4, 2, E, dtype=torch.float64)
    module(x, x, x)[0].pow(2).sum().backward()
    # each head's own gradient, against central finite differences of the same loss
    for head in range(HEADS):
        with torch.no_grad():
            losses = []
            for step in (1e-6, -1e-6):
                module.log_gamma[head] += step
                losses.append(module(x, x, x)[0].pow(2).sum())
                module.log_gamma[head] -= step
        numeric = (losses[0] - losses[1]) / 2e-6
        assert module.log_gamma.grad[head] != 0
        torch.testing.assert_close(module.log_gamma.grad[head], numeric, rtol=1e-5, atol=1e-8)
    # a fixed gamma is no parameter at all (checkpoints and optimisers never see it)
    fixed = make("relu", relu_gamma=2.0)
    assert fixed.log_gamma is None and fixed.gamma == 2.0
    assert not any("gamma" in name for name, _ in fixed.named_parameters())
    # and learn_gamma is ignored by activations without a gamma
    assert make("softmax", relu_learn_gamma=True).log_gamma is None


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_incremental_self_attention_equals_full_pass(activation):
    module = make(activation).eval()
    x = torch.randn(7, 3, E)
    full, full_weights = module(x, x, x, attn_mask=future_mask(7), need_weights=True)
    state, steps, step_weights = {}, [], []
    for t in range(7):
        step = x[t:t + 1]
        out, weights = module(step, step, step, incremental_state=state, need_weights=True)
        steps.append(out)
        step_weights.append(weights)
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-5, atol=1e-5)
    for t, weights in enumerate(step_weights):
        torch.testing.assert_close(weights[:, 0, :], full_weights[:, t, :t + 1], rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_incremental_cross_attention_with_shared_beam_keys(activation):
    """Beam search shares each sentence's encoder keys (set_beam_size); same result."""
    module = make(activation, kind="cross").eval()
    bsz, beam = 2, 3
    memory = torch.randn(5, bsz, E).repeat_interleave(beam, dim=1)
    padding = torch.zeros(bsz, 5, dtype=torch.bool)
    padding[1, -2:] = True
    padding = padding.repeat_interleave(beam, dim=0)
    queries = torch.randn(4, bsz * beam, E)
    full, _ = module(queries, memory, memory, key_padding_mask=padding, static_kv=True)
    module.set_beam_size(beam)
    state, steps = {}, []
    for t in range(4):
        out, _ = module(queries[t:t + 1], memory, memory, key_padding_mask=padding,
                        incremental_state=state, static_kv=True, need_weights=True)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-5, atol=1e-5)


def test_cross_attention_counts_only_real_source_keys():
    module = make("relu", kind="cross").eval()
    memory = torch.randn(6, 2, E)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[0, -4:] = True
    x = torch.randn(3, 2, E)
    out, _ = module(x, memory, memory, key_padding_mask=padding)
    torch.testing.assert_close(out, relu_reference(module, x, memory, padding), rtol=1e-5,
                               atol=1e-6)
    module.need_statistics = True
    module(x, memory, memory, key_padding_mask=padding)
    n = module.attention_statistics().n
    assert torch.all(n[0] == 2) and torch.all(n[1] == 6)


def test_statistics_recorded_on_request_only_and_exclude_padded_queries():
    module = make("relu").train()
    x = torch.randn(5, 2, E)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[0, -2:] = True
    module(x, x, x, key_padding_mask=padding)
    assert module.attention_statistics() is None  # training alone asks for nothing
    module.need_statistics = True
    module(x, x, x, key_padding_mask=padding)
    stats = module.attention_statistics()
    assert stats.regularizable and stats.row_sum.requires_grad
    assert stats.valid.shape == (2, HEADS, 5)
    assert not stats.valid[0, :, -2:].any() and stats.valid[1].all()


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_returned_weights_are_the_weights_used(activation):
    module = make(activation).eval()
    x = torch.randn(5, 2, E)
    _, weights = module(x, x, x, need_head_weights=True)
    v = module.v_proj(x).view(5, 2, HEADS, -1).permute(1, 2, 0, 3)
    mixed = torch.matmul(weights.transpose(0, 1), v)  # (B, H, T, D)
    if activation == "rela":
        mixed = mixed * torch.rsqrt(mixed.pow(2).mean(-1, keepdim=True) + 1e-6)
        mixed = mixed * module.rela_gain
    out = mixed.permute(2, 0, 1, 3).reshape(5, 2, E)
    if activation == "rela":
        out = out * torch.sigmoid(module.rela_gate(x))
    torch.testing.assert_close(module.out_proj(out), module(x, x, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "rela"])
def test_key_chunking_matches_dense_in_training(activation):
    x = torch.randn(9, 2, E)
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, :3] = True
    results = []
    for chunk in (0, 4):
        module = make(activation, attention_backend="reference",
                      attention_key_chunk_size=chunk).train()
        module.need_statistics = True
        out, _ = module(x, x, x, key_padding_mask=padding, attn_mask=future_mask(9))
        out.pow(2).sum().backward()
        results.append((out, module.q_proj.weight.grad, module.attention_statistics().entropy))
    for dense, chunked in zip(*results):
        torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(relu_gamma=0.0), "--relu-gamma must be a finite number > 0"),
    (dict(relu_gamma=1e-4), "--relu-gamma must be >= 0.001"),
    (dict(relu_attention_scaling="rms"), "--relu-attention-scaling 'rms' is unknown"),
    (dict(relu_attention_scaling="none", relu_learn_gamma=True),
     "--relu-learn-gamma learns the gamma"),
    (dict(activation="gelu"), "--attention-activation 'gelu' is unknown"),
    (dict(attention_key_chunk_size=-1), "--attention-key-chunk-size must be an integer >= 0"),
    (dict(attention_key_chunk_size=8), "--attention-key-chunk-size: a key chunk size .8. is "
     "read only by the reference backend; backend 'auto' ignores it"),
    (dict(attention_backend="cuda"), "--attention-backend: backend 'cuda' is unknown"),
    (dict(xformers_att_config='{"name": "scaled_dot_product"}'), "xformers"),
])
def test_bad_settings_name_the_flag(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ActivationMultiheadAttention(E, HEADS, self_attention=True, **kwargs)


def test_every_activation_binds_one_attention_function():
    q, k, v = torch.randn(3, 1, 2, 4, 8)
    for name in ACTIVATIONS:
        assert bind_attention(name)(q, k, v, **make(name)._attention_parameters()).out.shape \
            == q.shape
    with pytest.raises(ValueError, match="--attention-activation 'gelu' is unknown"):
        bind_attention("gelu")


def attention_output_variance(scaling, length):
    """Variance of the heads' output (identity projections) for independent unit-variance
    queries, keys and values, as the variance argument of the factor assumes."""
    dim = 64
    module = ActivationMultiheadAttention(dim, 1, relu_attention_scaling=scaling,
                                          relu_gamma=1.0).eval()
    with torch.no_grad():
        for proj in (module.q_proj, module.k_proj, module.v_proj, module.out_proj):
            proj.weight.copy_(torch.eye(dim))
            proj.bias.zero_()
    generator = torch.Generator().manual_seed(length)
    queries = torch.randn(64, 4, dim, generator=generator)
    keys = torch.randn(length, 4, dim, generator=generator)
    values = torch.randn(length, 4, dim, generator=generator)
    with torch.no_grad():
        return module(queries, keys, values, need_weights=False)[0].var().item()


def test_output_variance_grows_with_length_only_without_the_factor():
    lengths = [16, 64, 256, 1024]
    factor = [attention_output_variance("factor", n) for n in lengths]
    none = [attention_output_variance("none", n) for n in lengths]
    layernorm = [attention_output_variance("layernorm", n) for n in lengths]
    assert all(1 / 1.5 <= var <= 1.5 for var in factor), factor
    assert all(b > a for a, b in zip(none, none[1:])), none
    assert none[-1] / none[0] > 30, none  # ~ n/2: 8 at n = 16, 512 at n = 1024
    assert all(abs(var - 1) < 0.01 for var in layernorm), layernorm


@pytest.mark.parametrize("scaling", ["none", "layernorm"])
def test_relu_scalings_match_their_formula(scaling):
    module = make("relu", relu_attention_scaling=scaling, relu_gamma=3.0).eval()
    x = torch.randn(6, 3, E)
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[1, :2] = True
    out, weights = module(x, x, x, key_padding_mask=padding, attn_mask=future_mask(6),
                          need_head_weights=True)
    v = module.v_proj(x).view(6, 3, HEADS, -1).permute(1, 2, 0, 3)
    mixed = torch.matmul(weights.transpose(0, 1), v).permute(2, 0, 1, 3).reshape(6, 3, E)
    q = module.q_proj(x).view(6, 3, HEADS, -1).permute(1, 2, 0, 3)
    k = module.k_proj(x).view(6, 3, HEADS, -1).permute(1, 2, 0, 3)
    visible = ~padding[:, None, None, :] & ~(future_mask(6) < 0)
    scores = torch.relu(q @ k.transpose(-1, -2) / math.sqrt(E // HEADS)) * visible
    # no factor: the weights are the ReLU scores themselves, gamma plays no part
    torch.testing.assert_close(weights.transpose(0, 1), scores, rtol=1e-5, atol=1e-6)
    if scaling == "layernorm":
        assert module.relu_output_norm is not None
        mixed = torch.nn.functional.layer_norm(mixed, (E,), module.relu_output_norm.weight,
                                               module.relu_output_norm.bias)
    else:
        assert module.relu_output_norm is None
    torch.testing.assert_close(out, module.out_proj(mixed), rtol=1e-5, atol=1e-5)
