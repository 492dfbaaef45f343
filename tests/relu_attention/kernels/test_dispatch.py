"""dispatch: one backend choice, one contract for every backend, chunk sizes only where read."""

import inspect

import pytest
import torch

from relu_former.relu_attention.kernels import dispatch
from relu_former.relu_attention.kernels.tiled import tiled_relu_sums

CONTRACT = {"key_padding_mask": None, "attn_mask": None, "dropout_p": 0.0, "seed": None,
            "need_sums": True}


@pytest.mark.parametrize("name", sorted(dispatch.BACKENDS))
def test_every_backend_has_the_same_keyword_contract(name):
    parameters = inspect.signature(dispatch.BACKENDS[name]).parameters
    assert list(parameters)[:3] == ["q", "k", "v"]
    for keyword, default in CONTRACT.items():
        assert parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[keyword].default == default


def inputs():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 4, generator=generator, dtype=torch.float64)
               for n in (5, 7, 7))
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, :2] = True
    blocked = torch.zeros(5, 7, dtype=torch.bool)
    blocked[1, 3:] = True
    return q, k, v, pad, blocked


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", ["tiled", "flex"])
def test_backends_agree_with_the_reference(name):
    q, k, v, pad, blocked = inputs()
    want = dispatch.relu_sums(q, k, v, backend="reference", key_padding_mask=pad,
                              attn_mask=blocked)
    got = dispatch.relu_sums(q, k, v, backend=name, key_padding_mask=pad, attn_mask=blocked)
    for a, b in zip(got[:4], want[:4]):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["auto", "tiled", "flex"])
def test_a_chunk_size_the_backend_ignores_is_an_error(name):
    q, k, v, _, _ = inputs()
    with pytest.raises(ValueError, match="read only by the reference backend"):
        dispatch.relu_sums(q, k, v, backend=name, key_chunk_size=3)
    dispatch.relu_sums(q, k, v, backend="reference", key_chunk_size=3)  # read there


def test_unknown_backend_names_the_choices():
    q, k, v, _, _ = inputs()
    with pytest.raises(ValueError, match="auto, reference, tiled, cpp, flex"):
        dispatch.relu_sums(q, k, v, backend="cuda")


def test_another_backend_is_one_entry(monkeypatch):
    """A new backend is one line of BACKENDS."""
    monkeypatch.setitem(dispatch.BACKENDS, "mine", lambda *a, **kw: tiled_relu_sums(*a, **kw))
    q, k, v, pad, _ = inputs()
    got = dispatch.relu_sums(q, k, v, backend="mine", key_padding_mask=pad)
    want = dispatch.relu_sums(q, k, v, backend="tiled", key_padding_mask=pad)
    assert all(torch.equal(a, b) for a, b in zip(got[:4], want[:4]))
