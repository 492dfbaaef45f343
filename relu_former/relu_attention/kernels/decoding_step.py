"""ReLU attention of a decoding step: a few queries, no gradient, in two products.

ReLUFormer (arXiv 2302.06461) section 4.1, for queries i against keys j:

    out_i = f_i sum_j relu(q_i . k_j / sqrt(d)) v_j,    f_i = 1 / (gamma sqrt(n_i / 2)) > 0.

Since relu(c x) = c relu(x) for c > 0, the scale c_i = f_i / sqrt(d) goes into the query
before the product, and the step is

    s = relu((c q) k^T)      (B, H, Tq, Tk), blocked keys set to 0
    out = s v.

A decoding step has one query per hypothesis (Tq = 1, or the beam folded into Tq for the
encoder's shared keys), so s is a few rows per head: writing them costs less than the tiled
kernels' set-up (mask tables, per-thread buffers, a BLAS call per tile), and this is the path
that keeps the step as fast as softmax's. Training and long queries take the tiled kernels,
which never write s. No dropout, no statistics: a decoding step asks for neither.
"""

from __future__ import annotations

from torch import Tensor

from relu_former.relu_attention.kernels.common import visible_keys

# At most this many queries per (batch, head): the dense path's scores stay a few rows.
MAX_QUERIES = 16


def decoding_step(q: Tensor, k: Tensor, v: Tensor, *, row_scale: Tensor | float,
                  key_padding_mask: Tensor | None = None,
                  attn_mask: Tensor | None = None) -> Tensor:
    """out (B, H, Tq, Dv) of the module docstring; ``row_scale`` is f_i, a positive number or
    a tensor broadcasting against (B, H, Tq, 1); masks as in ``kernels.common``."""
    scores = (q * (row_scale * q.size(-1) ** -0.5)).matmul(k.transpose(-1, -2)).relu_()
    visible = visible_keys(key_padding_mask, attn_mask)
    if visible is not None:
        scores = scores.masked_fill_(~visible, 0.0)
    return scores.matmul(v)
