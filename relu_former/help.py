"""``python -m relu_former.help [NAME ...]``: the flags of the plugin's registered names.

fairseq answers ``--help`` before it adds the flags of the chosen ``--arch``, ``--criterion``
and ``--task``; this prints what it would have added, for every name the plugin registers or
the names given."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Dict, List, Sequence

from fairseq.criterions import CRITERION_DATACLASS_REGISTRY, CRITERION_REGISTRY
from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_DATACLASS_REGISTRY, TASK_REGISTRY

import relu_former.plugin  # noqa: F401  (registers the names)
from relu_former.relu_attention.kernels.backend_report import backends_report

PLUGIN = "relu_former"


def plugin_names() -> Dict[str, List[str]]:
    """The plugin's architectures, criterions and tasks, in registration order."""
    registries = {"arch": ARCH_CONFIG_REGISTRY, "criterion": CRITERION_REGISTRY,
                  "task": TASK_REGISTRY}
    return {kind: [name for name, obj in registry.items()
                   if obj.__module__.split(".")[0] == PLUGIN]
            for kind, registry in registries.items()}


def _parser(prog: str, source: type | None = None) -> argparse.ArgumentParser:
    """A parser named ``prog`` with the flags of ``source`` (a model or a config dataclass)."""
    parser = argparse.ArgumentParser(prog=prog, usage=argparse.SUPPRESS, add_help=False,
                                     argument_default=argparse.SUPPRESS)
    if dataclasses.is_dataclass(source):
        gen_parser_from_dataclass(parser, source())
    elif source is not None:
        source.add_args(parser)
    return parser


def _flag_source(kind: str, name: str) -> type:
    """The class whose flags fairseq adds for ``--<kind> <name>``: a model or a dataclass."""
    if kind == "arch":
        return ARCH_MODEL_REGISTRY[name]
    if kind == "criterion":
        return CRITERION_DATACLASS_REGISTRY.get(name) or CRITERION_REGISTRY[name]
    return TASK_DATACLASS_REGISTRY.get(name) or TASK_REGISTRY[name]


def _fairseq_parent(source: type) -> type | None:
    """The first fairseq class (model or config dataclass) that ``source`` extends."""
    for base in source.__mro__[1:]:
        if base.__module__.split(".")[0] == PLUGIN or base is FairseqDataclass:
            continue
        if (dataclasses.is_dataclass(base) if dataclasses.is_dataclass(source)
                else hasattr(base, "add_args")):
            return base
    return None


def flags_parser(kind: str, name: str, plugin_only: bool = True) -> argparse.ArgumentParser:
    """A parser of the flags fairseq adds for ``--<kind> <name>``; ``plugin_only``: just those
    the plugin adds to the fairseq class it extends (fairseq documents its own)."""
    source = _flag_source(kind, name)
    parser = _parser(f"--{kind} {name}", source)
    parent = _fairseq_parent(source) if plugin_only else None
    if parent is None:
        return parser
    inherited = {action.dest for action in _parser("stock", parent)._actions}
    ours = _parser(parser.prog)
    for action in parser._actions:
        if action.dest not in inherited:
            ours._add_action(action)
    return ours


def describe(names: Sequence[str] = (), plugin_only: bool = True) -> str:
    """Help text for the given plugin names (all of them when empty)."""
    registered = plugin_names()
    wanted = set(names)
    unknown = wanted - {n for group in registered.values() for n in group}
    if unknown:
        listing = "; ".join(f"{kind}: {', '.join(group)}" for kind, group in registered.items())
        raise SystemExit(f"relu_former.help: unknown name(s) {sorted(unknown)}. "
                         f"The plugin registers {listing}")
    parts = []
    for kind, group in registered.items():
        for name in [name for name in group if not wanted or name in wanted]:
            body = flags_parser(kind, name, plugin_only).format_help()
            # an architecture's docstring says what it is, and which settings are published
            doc = ARCH_CONFIG_REGISTRY[name].__doc__ if kind == "arch" else None
            about = " ".join(doc.split()) + "\n" if doc else ""
            parts.append(f"=== --{kind} {name} ===\n{about}{body}")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m relu_former.help",
                                     description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("names", nargs="*", help="architectures, criterions or tasks "
                        "(default: all the plugin registers)")
    parser.add_argument("--list", action="store_true", help="only list the registered names")
    parser.add_argument("--all-flags", action="store_true",
                        help="for architectures, also the flags of the fairseq model they extend")
    parser.add_argument("--backends", action="store_true",
                        help="which ReLU attention backend --attention-backend auto runs on "
                        "each device present, and why (the compiled CPU kernel, Triton)")
    args = parser.parse_args(argv)
    if args.backends:
        print(backends_report())
    elif args.list:
        print("\n".join(f"{kind}: {' '.join(group)}" for kind, group in plugin_names().items()))
    else:
        print(describe(args.names, plugin_only=not args.all_flags))


if __name__ == "__main__":
    main(sys.argv[1:])
