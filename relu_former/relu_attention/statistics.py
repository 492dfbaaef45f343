"""Attention statistics on request, in the style of fairseq's ``get_aux_loss()``.

The attention modules compute nothing beyond their output unless asked: a criterion (or an
analysis tool) asks the model, runs the forward pass inside the request and reads the figures
before leaving it::

    with model.requested_attention_statistics():
        net_output = model(**sample["net_input"])
        statistics = model.attention_statistics(row_sum="scores")

Leaving the request clears the stored figures, so nothing stale survives into the next batch
and nothing is paid for in a step that did not ask. ``AttentionStatisticsMixin`` gives a
fairseq model the two methods; the free functions do the same for any module tree that holds
attention modules (their ``need_statistics`` flag and ``attention_statistics`` method are the
whole protocol).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, List

from torch import nn

from relu_former.relu_attention.kernels.common import AttentionStatistics


def statistics_modules(model: nn.Module) -> List[nn.Module]:
    """The modules of ``model`` that can record statistics (they have ``need_statistics``)."""
    return [m for m in model.modules() if hasattr(m, "need_statistics")
            and callable(getattr(m, "attention_statistics", None))]


@contextlib.contextmanager
def requested_attention_statistics(model: nn.Module) -> Iterator[List[nn.Module]]:
    """Inside: every attention module of ``model`` records its statistics; after: cleared."""
    modules = statistics_modules(model)
    for module in modules:
        module.need_statistics = True
    try:
        yield modules
    finally:
        for module in modules:
            module.need_statistics = False
            module._statistics = None


def collect_attention_statistics(model: nn.Module,
                                 row_sum: str = "scores") -> List[AttentionStatistics]:
    """The statistics each attention module recorded in the last forward pass of the request."""
    found = []
    for module in statistics_modules(model):
        stats = module.attention_statistics(row_sum=row_sum)
        if stats is not None:
            found.append(stats)
    return found


class AttentionStatisticsMixin:
    """``requested_attention_statistics()`` and ``attention_statistics()`` on a model."""

    def requested_attention_statistics(self) -> contextlib.AbstractContextManager:
        """A context inside which the model's attention modules record statistics."""
        return requested_attention_statistics(self)

    def attention_statistics(self, row_sum: str = "scores") -> List[AttentionStatistics]:
        """The figures of the last forward pass inside ``requested_attention_statistics``."""
        return collect_attention_statistics(self, row_sum)
