"""The feed-forward block read as a key-value memory (the ReLUFormer paper, section 3).

fc1's rows are memory keys, fc2's columns the values, and the FFN width is the number of slots:

    stock       fc2(act(fc1 x))             the stock block (act = --activation-fn; old name relu)
    softmax     fc2(softmax(fc1 x))          slots weighted like attention over memory
    softmax_ln  LN(fc2(softmax(fc1 x)))      the same, with a LayerNorm on the memory output

fairseq's transformer layers compute ``fc2(dropout(activation_fn(fc1(x))))``; the variants
replace ``activation_fn`` (``memory_activation``) and ``fc2`` (``build_memory_fc2``), so
everything else in the layer (dropouts, residuals, quant-noise, pruning) stays fairseq's.
"""

from __future__ import annotations

from typing import Callable

import torch
from fairseq.modules import LayerNorm
from fairseq.modules.quant_noise import quant_noise
from torch import Tensor, nn

from relu_former.relu_attention.config import FFN_ACTIVATIONS, check_ffn_activation

__all__ = ["FFN_ACTIVATIONS", "check_ffn_activation", "build_memory_fc2", "memory_activation"]

def softmax_over_slots(x: Tensor) -> Tensor:
    """Softmax over the FFN width (the memory slots), computed in float32 for stability."""
    return torch.softmax(x.float(), dim=-1).type_as(x)


def memory_activation(name: str, stock: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """The activation between fc1 and fc2: the layer's own for ``stock``, else softmax."""
    check_ffn_activation(name)
    return softmax_over_slots if name in ("softmax", "softmax_ln") else stock


class MemoryOutput(nn.Linear):
    """fc2 followed by a LayerNorm over the model width (the ``softmax_ln`` variant).

    A Linear subclass, so code that reads ``fc2.weight`` (pruning, quant-noise) still works.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        self.memory_layer_norm = LayerNorm(out_features)

    def forward(self, x: Tensor) -> Tensor:
        return self.memory_layer_norm(super().forward(x))


def build_memory_fc2(name: str, input_dim: int, output_dim: int, q_noise: float,
                     qn_block_size: int) -> nn.Module:
    """fc2 of the FFN variant ``name`` (a plain Linear unless ``softmax_ln``)."""
    check_ffn_activation(name)
    layer = (MemoryOutput(input_dim, output_dim) if name == "softmax_ln"
             else nn.Linear(input_dim, output_dim))
    return quant_noise(layer, q_noise, qn_block_size)
