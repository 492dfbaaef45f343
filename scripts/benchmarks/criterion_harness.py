"""A stand-in task and model to run a fairseq criterion on fixed logits (benchmarks, tests):
a criterion needs only the task's target dictionary and the model's logits, targets and
normalised probabilities.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary


class DictionaryTask:
    """A task with a target dictionary of ``vocab`` symbols (fairseq's specials included)."""

    def __init__(self, vocab: int) -> None:
        self.target_dictionary = Dictionary()
        for i in range(vocab - len(self.target_dictionary)):
            self.target_dictionary.add_symbol(f"w{i}")


class LogitsModel(torch.nn.Module):
    """Returns fixed logits (a trainable parameter), as a decoder's output projection would."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(logits)

    def forward(self, **net_input):
        return self.logits, {"attn": [None]}

    def get_targets(self, sample, net_output):
        return sample["target"]

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return F.log_softmax(net_output[0], dim=-1)
