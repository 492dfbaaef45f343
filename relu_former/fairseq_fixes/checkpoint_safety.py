"""fairseq checkpoints under torch's ``weights_only`` unpickler (torch >= 2.6): allowlist
exactly the classes they hold, so anything else is still refused. Not a patch: torch's own
allowlist (why numpy's two functions are safe: docs/design.md#checkpoint-loading)."""

from __future__ import annotations

import argparse
import collections
import typing

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, nodes
from omegaconf.base import ContainerMetadata, Metadata

_NUMBERS = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
            np.uint64, np.float16, np.float32, np.float64)


def fairseq_checkpoint_globals() -> list:
    """The classes a fairseq checkpoint pickles besides tensors and builtins, and numpy's array
    and scalar reconstruction under numpy 1.x's and 2.x's module paths, as ``(function, name)``."""
    found: list = [argparse.Namespace, collections.defaultdict, typing.Any, np.ndarray, np.dtype]
    for function in (np.ndarray.__reduce__(np.zeros(1))[0], np.float64(0).__reduce__()[0]):
        found += [(function, f"numpy.{core}.multiarray.{function.__name__}")
                  for core in ("core", "_core")]
    found += list(dict.fromkeys(type(np.dtype(number)) for number in _NUMBERS))
    # fairseq 0.10/0.11 pickle DictConfig; its metadata names plain types, never called
    return found + [DictConfig, ListConfig, ContainerMetadata, Metadata, dict, list, int, str,
                    float, bool, nodes.AnyNode, nodes.StringNode, nodes.IntegerNode,
                    nodes.FloatNode, nodes.BooleanNode, nodes.EnumNode, nodes.PathNode,
                    nodes.BytesNode]


def allow_fairseq_checkpoint_globals() -> None:
    """Allowlist :func:`fairseq_checkpoint_globals` for ``torch.load`` (idempotent)."""
    already = set(torch.serialization.get_safe_globals())
    missing = [g for g in fairseq_checkpoint_globals() if g not in already]
    if missing:
        torch.serialization.add_safe_globals(missing)
