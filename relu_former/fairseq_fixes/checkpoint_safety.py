"""Safe loading of fairseq checkpoints under torch's ``weights_only`` unpickler.

fairseq-fixed 0.12.3.1 (as fairseq 0.12.x) calls ``torch.load`` without ``weights_only``, and
torch >= 2.6 (2.13 here) then loads with ``weights_only=True``: only tensors, containers and
explicitly allowlisted classes may be unpickled, so a checkpoint cannot run code on load.
fairseq checkpoints also hold an ``argparse.Namespace`` (legacy ``args``), omegaconf containers
(``cfg``) and a few plain-Python types in ``extra_state``. We allowlist exactly those classes,
not the whole unpickler, so anything else (a pickled function, say) is still refused with
``UnpicklingError``.
"""

from __future__ import annotations

import argparse
import collections
import typing

import torch


def fairseq_checkpoint_globals() -> list:
    """The classes a fairseq 0.12 checkpoint pickles besides tensors and builtins."""
    found: list = [argparse.Namespace, collections.defaultdict, typing.Any]
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
