"""Timing and peak-memory measurement shared by the ``bench_*.py`` scripts: the median per
case over interleaved rounds (load on a shared CPU changes slowly against one round), and
the most tensor memory held at once (:class:`PeakTensorMemory`, any device).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from scripts.common.atomic_files import write_text_atomic

MIB = 2.0**20  # bytes in a MiB, the unit of every memory column


def log(message: str) -> None:
    """Progress on stderr, flushed at once, so that stdout holds only results."""
    print(message, file=sys.stderr, flush=True)


class BenchmarkParser(argparse.ArgumentParser):
    """The command line every ``bench_*.py`` shares: ``--quick``, flags whose default depends
    on it, ``--threads`` and ``--out``."""

    def __init__(self, doc: str, quick_help: str) -> None:
        super().__init__(description=doc.split("\n\n")[0],
                         formatter_class=argparse.RawDescriptionHelpFormatter)
        self._quick_defaults: dict[str, tuple[Any, Any]] = {}
        self.add_argument("--quick", action="store_true", help=quick_help)

    def add_quick_argument(self, flag: str, full: Any, quick: Any, help: str,
                           **kwargs: Any) -> None:
        """A flag left unset takes ``quick`` under ``--quick``, else ``full`` (said in its help)."""
        action = self.add_argument(flag, default=None, **kwargs,
                                   help=f"{help} (default {full}; --quick {quick})")
        self._quick_defaults[action.dest] = (full, quick)

    def add_threads_and_out(self, out_help: str,
                            threads_help: str = "torch intra-op threads (default 1)") -> None:
        self.add_argument("--threads", type=int, default=1, help=threads_help)
        self.add_argument("--out", type=Path, default=None, help=out_help)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        for dest, (full, quick) in self._quick_defaults.items():
            if getattr(parsed, dest) is None:
                setattr(parsed, dest, quick if parsed.quick else full)
        return parsed


def finish_report(args: argparse.Namespace, name: str, text: str,
                  appendix: str = "") -> Path | None:
    """Print a benchmark's report and, with ``--out``, write it (plus ``appendix``) to
    ``OUT/NAME.md``; the path written, or None."""
    print(text)
    if args.out is None:
        return None
    return write_text_atomic(args.out / f"{name}.md", text + appendix)


def quiet_fairseq() -> None:
    """Silence fairseq's and hydra's logs and warnings: a benchmark's output is its table."""
    for name in ("fairseq", "hydra"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def torch_setup() -> str:
    """``torch VERSION, N thread(s)``: how every benchmark states what it ran on."""
    return f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)"


def tagged_log(tag: str) -> Callable[[str], None]:
    """A :func:`log` whose lines start with ``[tag HH:MM:SS]``."""

    def log_with_tag(message: str) -> None:
        log(f"[{tag} {time.strftime('%H:%M:%S')}] {message}")

    return log_with_tag


class PeakTensorMemory(TorchDispatchMode):
    """``with PeakTensorMemory() as mem: ...``, then ``mem.peak_bytes``: the most tensor
    memory held at once beyond what existed at the start (as ``max_memory_allocated``; it
    misses kernels' scratch buffers)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def _drop_freed(self) -> None:
        freed = [key for key, (ref, _) in self._live.items() if ref.expired()]
        for key in freed:
            self.current_bytes -= self._live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # Views and in-place results share an input's storage: they allocate nothing, and the
        # storage may predate the measurement.
        inputs = {StorageWeakRef(item.untyped_storage()).cdata
                  for item in tree_flatten((args, kwargs))[0] if isinstance(item, torch.Tensor)}
        out = func(*args, **kwargs)
        # Freed storages are dropped before the new outputs are added: a storage released
        # while ``func`` ran can hand its address to one of the outputs.
        self._drop_freed()
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                storage = item.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in self._live and ref.cdata not in inputs:
                    self._live[ref.cdata] = (ref, storage.nbytes())
                    self.current_bytes += storage.nbytes()
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        return out


def peak_memory_bytes(step: Callable[[], object]) -> int:
    """Peak tensor bytes held at once while ``step()`` runs (see :class:`PeakTensorMemory`)."""
    with PeakTensorMemory() as mem:
        step()
    return mem.peak_bytes


def interleaved_median_seconds(
    cases: Mapping[str, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median time (``clock``) of each case over ``rounds`` rounds after ``warmup``, the order
    reversed every other round (a case run after another inherits its state)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    times: dict[str, list[float]] = {name: [] for name in cases}
    forward = list(cases.items())
    for index in range(warmup + rounds):
        for name, step in (forward if index % 2 == 0 else forward[::-1]):
            start = clock()
            step()
            elapsed = clock() - start
            if index >= warmup:
                times[name].append(elapsed)
        if progress is not None:
            label = "warm-up" if index < warmup else f"round {index - warmup + 1}/{rounds}"
            progress(label)
    return {name: statistics.median(values) for name, values in times.items()}
