"""Attention statistics on request, in the style of fairseq's ``get_aux_loss()``.

The attention modules compute nothing beyond their output unless asked: a criterion (or an
analysis tool) asks the model, runs the forward pass inside the request and reads the figures
before leaving it::

    with model.requested_attention_statistics():
        net_output = model(**sample["net_input"])
        statistics = model.attention_statistics(row_sum="scores")

The model asks its layers for their attention modules (``attention_modules()`` of the plugin's
encoder and decoder layers) and each module switches its own recording on and off
(``record_statistics``); leaving the request clears the stored figures, so nothing stale
survives into the next batch and nothing is paid for in a step that did not ask.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, List

from torch import nn

from relu_former.relu_attention.kernels.common import AttentionStatistics


class AttentionStatisticsMixin:
    """``requested_attention_statistics()`` and ``attention_statistics()`` on a fairseq
    encoder-decoder model whose layers have ``attention_modules()``."""

    def attention_modules(self) -> List[nn.Module]:
        """The attention modules of the encoder's and the decoder's layers, in order."""
        return [module for part in (self.encoder, self.decoder) for layer in part.layers
                for module in layer.attention_modules()]

    @contextlib.contextmanager
    def requested_attention_statistics(self) -> Iterator[List[nn.Module]]:
        """Inside: every attention module records its statistics; after: cleared."""
        modules = self.attention_modules()
        for module in modules:
            module.record_statistics(True)
        try:
            yield modules
        finally:
            for module in modules:
                module.record_statistics(False)

    def attention_statistics(self, row_sum: str = "scores") -> List[AttentionStatistics]:
        """The figures of the last forward pass inside ``requested_attention_statistics``."""
        found = (module.attention_statistics(row_sum=row_sum)
                 for module in self.attention_modules())
        return [stats for stats in found if stats is not None]
