"""Token scorers and the pooling layer of the Transpooler and Pyramidion encoders.

A scorer gives every token a score in (0, 1]; the pooling layer keeps a soft top-k of the
tokens by those scores with the successive-halving operator
(:func:`relu_former.pyramidion.successive_halving.successive_halving_topk`),
turning ``[T, B, C]`` encoder states into ``[min(k, T), B, C]`` plus their padding mask.
Because the operator mixes each surviving token with a weaker partner, weighted by a softmax
of the two scores, the scores receive gradients and a trainable scorer learns what to keep.

Scorers (``--pooling-scorer``), as compared in the paper:

- ``linear`` (default): ``sigmoid(w . x + b)``.
- ``nonlinear``: ``sigmoid(w2 . gelu(W1 x + b1) + b2)``, a one-hidden-layer FFN.
- ``index``: ``(n - i) / n`` for the i-th real token of n (0-based): prefers the start of the
  document, like truncation, and has no parameters.
- ``random``: uniform noise, a fresh draw every forward pass; the baseline.
- ``power``: PoWER-BERT's significance, the attention a token receives: ``sum_i
  softmax_j(q_i . k_j / sqrt(C))`` over all real queries i, with the scorer's own query and
  key projections (so it is trained through the operator), divided by its maximum over the
  sentence. Costs O(T^2 C) once per pooling layer, computed in chunks of queries.
"""

from __future__ import annotations

import math
from typing import Dict, Tuple, Type

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relu_former.errors import OptionError
from relu_former.pyramidion.successive_halving import successive_halving_topk


def _real_mask(padding_mask: Tensor | None, x: Tensor) -> Tensor:
    """Float mask [B, T], 1 at real tokens, from a bool padding mask (True = padding)."""
    if padding_mask is None:
        return x.new_ones(x.shape[:2])
    return (~padding_mask).to(x.dtype)


class TokenScorer(nn.Module):
    """Base class: ``forward(x [B, T, C], padding_mask [B, T] or None) -> scores [B, T]``."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.embed_dim = embed_dim

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        raise NotImplementedError


class LinearScorer(TokenScorer):
    """``sigmoid(w . x + b)``: the paper's best and default scorer."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__(embed_dim)
        self.proj = nn.Linear(embed_dim, 1)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return torch.sigmoid(self.proj(x).squeeze(-1))


class NonlinearScorer(TokenScorer):
    """``sigmoid(w2 . gelu(W1 x + b1) + b2)`` with a hidden layer as wide as the model."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__(embed_dim)
        self.hidden = nn.Linear(embed_dim, embed_dim)
        self.out = nn.Linear(embed_dim, 1)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return torch.sigmoid(self.out(F.gelu(self.hidden(x))).squeeze(-1))


class IndexScorer(TokenScorer):
    """``(n - i) / n`` for the i-th real token of n: earlier tokens score higher; no weights.

    Positions count real tokens only, so left and right padding give the same scores.
    """

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        real = _real_mask(padding_mask, x)
        index = torch.cumsum(real, dim=1) - 1.0
        count = real.sum(dim=1, keepdim=True).clamp(min=1.0)
        return ((count - index) / count) * real


class RandomScorer(TokenScorer):
    """Uniform scores in (0, 1], drawn afresh on every call (the random-pooling baseline)."""

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        return 1.0 - torch.rand(x.shape[:2], dtype=x.dtype, device=x.device)


class PowerScorer(TokenScorer):
    """Attention received (PoWER-BERT), from a single trainable attention head."""

    query_chunk = 1024  # bounds the [chunk, T] attention matrix held at once

    def __init__(self, embed_dim: int) -> None:
        super().__init__(embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        real = _real_mask(padding_mask, x)
        q = self.q_proj(x) / math.sqrt(self.embed_dim)
        k = self.k_proj(x)
        key_bias = (1.0 - real).unsqueeze(1) * torch.finfo(x.dtype).min
        received = x.new_zeros(x.shape[:2])
        for start in range(0, x.size(1), self.query_chunk):
            stop = start + self.query_chunk
            weights = torch.softmax(q[:, start:stop] @ k.transpose(1, 2) + key_bias, dim=-1)
            received = received + (weights * real[:, start:stop, None]).sum(dim=1)
        received = received * real
        return received / received.amax(dim=1, keepdim=True).clamp(min=1e-9)


SCORERS: Dict[str, Type[TokenScorer]] = {
    "linear": LinearScorer,
    "nonlinear": NonlinearScorer,
    "index": IndexScorer,
    "random": RandomScorer,
    "power": PowerScorer,
}


def build_scorer(name: str, embed_dim: int) -> TokenScorer:
    """The scorer registered as ``name`` (one of :data:`SCORERS`)."""
    if name not in SCORERS:
        raise OptionError(
            "--pooling-scorer", f"{name!r} is unknown; choose one of {', '.join(SCORERS)}"
        )
    return SCORERS[name](embed_dim)


class TokenPooler(nn.Module):
    """Score tokens, then keep a soft top-k of them with successive halving.

    Args:
        embed_dim: width C of the states.
        scorer: a name in :data:`SCORERS`.
        base: the operator's base: a pair (a, b) is weighted by ``softmax(base ** v)``.
        temperature: if given, pairs are weighted by ``softmax(v / temperature)`` instead.
        sort: let the operator sort by score before pairing (its accuracy step).
        keep_order: return the kept tokens in their original order rather than by score.
    """

    def __init__(self, embed_dim: int, scorer: str = "linear", base: float = 20.0,
                 temperature: float | None = None, sort: bool = True,
                 keep_order: bool = True) -> None:
        super().__init__()
        if base <= 1.0:
            raise OptionError("--pooling-base", f"must be > 1 (published: 20), got {base}")
        if temperature is not None and temperature <= 0:
            raise OptionError("--pooling-temperature", f"must be > 0, got {temperature}")
        self.scorer = build_scorer(scorer, embed_dim)
        self.base = float(base)
        self.temperature = temperature
        self.sort = sort
        self.keep_order = keep_order

    def forward(self, x: Tensor, padding_mask: Tensor | None, k: int
                ) -> Tuple[Tensor, Tensor, Tuple[Tensor, Tensor]]:
        """Pool ``x`` [T, B, C] to ``[min(k, T), B, C]``; return it, its padding mask and
        where each input went.

        ``padding_mask`` is [B, T] with True at padding (or None); the returned mask is
        [B, min(k, T)], True where a pooled slot merged only padding. The last item is the
        pooled slot of every input position and its weight there, [B, T] each (0 at padding).
        """
        if k <= 0:
            raise ValueError(f"pooled length k must be positive, got {k}")
        states = x.transpose(0, 1)
        if padding_mask is None:
            padding_mask = states.new_zeros(states.shape[:2], dtype=torch.bool)
        scores = self.scorer(states, padding_mask)
        pooled = successive_halving_topk(
            states, scores, k, padding_mask, sort=self.sort, sort_back=self.keep_order,
            base=self.base, temperature=self.temperature,
        )
        return (pooled.values.transpose(0, 1), pooled.padding_mask,
                (pooled.source_slot, pooled.source_weight))
