"""The decoding step's dense path against the float64 reference, and when relu attention
takes it (a few queries, no gradient, no dropout, nothing else asked for)."""

import pytest
import torch

from relu_former.relu_attention import activations
from relu_former.relu_attention.activations import relu_attention
from relu_former.relu_attention.kernels.decoding_step import MAX_QUERIES
from tests.relu_attention.kernels.test_tiled import reference

B, H, D, TK = 2, 3, 5, 9


def masks(tgt_len):
    pad = torch.zeros(B, TK, dtype=torch.bool)
    pad[1, 6:] = True
    blocked = torch.rand(B, H, tgt_len, TK, generator=torch.Generator().manual_seed(3)) < 0.4
    blocked[0, 1, 0] = True  # a row that sees no key
    return {"none": (None, None), "padding": (pad, None), "4-d mask": (None, blocked),
            "both": (pad, blocked)}


@pytest.mark.parametrize("tgt_len", [1, 4, MAX_QUERIES])
@pytest.mark.parametrize("mask", ["none", "padding", "4-d mask", "both"])
@pytest.mark.parametrize("gamma", [1.0, "per head"])
def test_a_decoding_step_equals_the_float64_reference(tgt_len, mask, gamma, monkeypatch):
    generator = torch.Generator().manual_seed(tgt_len)
    q = torch.randn(B, H, tgt_len, D, generator=generator)
    k, v = (torch.randn(B, H, TK, D, generator=generator) for _ in range(2))
    pad, blocked = masks(tgt_len)[mask]
    gamma = torch.tensor([0.5, 1.0, 2.0]) if gamma == "per head" else gamma
    calls = []
    step = activations.decoding_step
    monkeypatch.setattr(activations, "decoding_step",
                        lambda *a, **kw: calls.append(1) or step(*a, **kw))
    with torch.no_grad():
        out = relu_attention(q, k, v, key_padding_mask=pad, attn_mask=blocked, gamma=gamma).out
    assert calls == [1]
    expected = reference(q, k, v, pad, blocked,
                         gamma.view(1, -1, 1) if torch.is_tensor(gamma) else gamma)[0]
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-6)
    if mask in ("4-d mask", "both"):
        assert torch.equal(out[0, 1, 0], torch.zeros(D))


@pytest.mark.parametrize("case", ["gradient", "long", "dropout", "statistics"])
def test_training_long_queries_and_requests_take_the_tiled_kernels(case, monkeypatch):
    monkeypatch.setattr(activations, "decoding_step",
                        lambda *a, **kw: pytest.fail("the decoding step was taken"))
    tgt_len = MAX_QUERIES + 1 if case == "long" else 1
    q, k, v = (torch.randn(B, H, n, D, requires_grad=case == "gradient")
               for n in (tgt_len, TK, TK))
    options = {"dropout": {"dropout_p": 0.1}, "statistics": {"need_statistics": True}}
    with torch.set_grad_enabled(case == "gradient"):
        relu_attention(q, k, v, **options.get(case, {}))
