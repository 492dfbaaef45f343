"""Safe loading of fairseq checkpoints under torch's ``weights_only`` unpickler.

fairseq 0.12 calls ``torch.load`` without ``weights_only``, and torch >= 2.6 then loads with
``weights_only=True``, which refuses the ``argparse.Namespace``, omegaconf containers and
numpy values fairseq checkpoints hold. We allowlist exactly those classes, so anything else
(a pickled function, say) is still refused. numpy's ``_reconstruct`` and ``scalar`` (the
meters' BLEU counts) only copy raw bytes of a checked length into an array or a number whose
class the unpickler has already checked; an object array receives elements the same
restricted unpickler built. numpy 1.x and 2.x pickle them under two module paths: both are
allowed. Not a patch (torch's own allowlist); no probe needed: torch < 2.4 has no allowlist.
"""

from __future__ import annotations

import argparse
import collections
import typing

import torch


def numpy_checkpoint_globals() -> list:
    """numpy's array and scalar reconstruction, ``ndarray``, ``dtype`` and the dtype classes
    of booleans, integers and floats; each function under both numpy 1.x's and 2.x's module
    path, as ``(function, name)``. Empty without numpy."""
    try:
        import numpy as np
    except ImportError:
        return []
    # The functions numpy's own pickles call, whichever module numpy keeps them in.
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]
    scalar = np.float64(0).__reduce__()[0]
    found: list = [np.ndarray, np.dtype]
    for function in (reconstruct, scalar):
        found += [(function, f"numpy.{core}.multiarray.{function.__name__}")
                  for core in ("core", "_core")]
    numbers = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
               np.uint32, np.uint64, np.float16, np.float32, np.float64)
    found += list(dict.fromkeys(type(np.dtype(number)) for number in numbers))
    return found


def fairseq_checkpoint_globals() -> list:
    """The classes (and numpy's two reconstruction functions) a fairseq 0.12 checkpoint
    pickles besides tensors and builtins."""
    found: list = [argparse.Namespace, collections.defaultdict, typing.Any]
    found += numpy_checkpoint_globals()
    try:
        from omegaconf import DictConfig, ListConfig, nodes
        from omegaconf.base import ContainerMetadata, Metadata
    except ImportError:  # omegaconf is a fairseq dependency; without it there is nothing to add
        return found
    # Checkpoints of fairseq 0.10/0.11 pickle the DictConfig itself; its metadata refers to
    # plain types (object_type=dict, key_type=int, ...) by name, which the unpickler only
    # reads as values: it never calls them on checkpoint data.
    found += [DictConfig, ListConfig, ContainerMetadata, Metadata]
    found += [dict, list, int, str, float, bool]
    found += [
        getattr(nodes, name)
        for name in (
            "AnyNode", "StringNode", "IntegerNode", "FloatNode", "BooleanNode",
            "EnumNode", "PathNode", "BytesNode",
        )
        if hasattr(nodes, name)
    ]  # fmt: skip
    return found


def allow_fairseq_checkpoint_globals() -> None:
    """Allowlist the fairseq checkpoint classes for ``torch.load(weights_only=True)``.

    Idempotent; a no-op on torch versions without ``add_safe_globals`` (< 2.4), which load
    with ``weights_only=False`` by default anyway.
    """
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:
        return
    already = set(torch.serialization.get_safe_globals())
    missing = [g for g in fairseq_checkpoint_globals() if g not in already]
    if missing:
        add_safe_globals(missing)
