"""Safe loading of fairseq checkpoints under torch's ``weights_only`` unpickler.

fairseq-fixed 0.12.3.1 (as fairseq 0.12.x) calls ``torch.load`` without ``weights_only``, and
torch >= 2.6 (2.13 here) then loads with ``weights_only=True``: only tensors, containers and
explicitly allowlisted classes may be unpickled, so a checkpoint cannot run code on load.
fairseq checkpoints also hold an ``argparse.Namespace`` (legacy ``args``), omegaconf containers
(``cfg``) and a few plain-Python types in ``extra_state``. We allowlist exactly those classes,
not the whole unpickler, so anything else (a pickled function, say) is still refused with
``UnpicklingError``.

numpy values. ``extra_state["metrics"]`` holds fairseq's meters, and a translation run with
``--eval-bleu`` sums its n-gram counts in numpy arrays (``_bleu_counts``, ``_bleu_totals``); a
score computed with numpy stays a numpy scalar. Such a pickle names numpy's ``_reconstruct``
(an empty array of a given class) and ``scalar`` (a number from its raw bytes), ``ndarray``
and ``dtype``, and sets each dtype's state, which the unpickler allows only for allowlisted
classes (one per dtype, ``numpy.dtypes.Int64DType`` say). We allow those, for booleans,
integers and floats only. They are safe because they only copy data: ``_reconstruct`` makes an
empty array whose class the unpickler has already checked; ``ndarray.__setstate__`` and
``scalar`` copy raw bytes of a checked length into an array or a number. An object array (its
dtype is not on the list, but safety does not rest on that) receives its elements as a list
the same restricted unpickler built, so a function or foreign class inside it is refused like
anywhere else. numpy 1.x pickles the two functions from ``numpy.core.multiarray``, numpy 2.x
from ``numpy._core.multiarray``: the installed functions are allowed under both names, so a
checkpoint written under either numpy loads.
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
