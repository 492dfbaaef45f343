"""fairseq-generate that also reports its decoding time on the process's CPU clock.

fairseq-generate times its generation loop by the clock on the wall (its ``StopwatchMeter``
around each batch's ``inference_step``) and prints ``Translated N sentences (T tokens) in
Xs``. On a shared machine that figure reads the load: the same model decoded beside a
training takes up to twice as long, so decode times of cells that finished at different
times are not comparable. The CPU seconds the process spends over the same intervals,

    cpu = sum over batches of (process_time() at stop - process_time() at start),

hardly depend on the load (a decoding runs on one thread: ``OMP_NUM_THREADS=1`` from the
runner), the way the training's CPU seconds per update do. This launcher
(``python -m scripts.reproduce.timed_generate <fairseq-generate args>``, the command the
translation and summary cells decode with) runs fairseq-generate with that stopwatch
replaced by one that keeps both clocks, and after fairseq's own line logs

    Decoding CPU time: Ys

which :func:`scripts.reproduce.log_figures.decode_times` reads beside the wall time. Nothing
else of fairseq-generate changes: its output is the same, line for line, before that line.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, List, Sequence

from scripts.common.fairseq_cli import fairseq_command

MODULE = "scripts.reproduce.timed_generate"
CPU_LINE = "Decoding CPU time: {:.2f}s"


def command(fairseq_generate: Sequence[Any]) -> List[Any]:
    """The fairseq-generate command line ``fairseq_generate`` run through this launcher."""
    return [sys.executable, "-m", MODULE, *fairseq_generate[1:]]


def cpu_stopwatch(stopwatch: type) -> type:
    """fairseq's ``StopwatchMeter`` class that also sums this process's CPU seconds over
    the intervals it times (``cpu``); each instance made is kept in ``made``."""

    class CPUStopwatch(stopwatch):  # type: ignore[misc, valid-type]
        made: List[CPUStopwatch] = []

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.cpu, self.cpu_start = 0.0, None
            CPUStopwatch.made.append(self)

        def start(self) -> None:
            self.cpu_start = time.process_time()
            super().start()

        def stop(self, n: Any = 1, prehook: Any = None) -> None:
            super().stop(n, prehook)
            if self.cpu_start is not None:
                self.cpu += time.process_time() - self.cpu_start
                self.cpu_start = None

    return CPUStopwatch


def main(args: Sequence[str]) -> None:
    """Run fairseq-generate with ``args``, then log its generation loop's CPU seconds."""
    # As fairseq-generate itself (the plugin's one-line errors, argparse's program name):
    # see scripts.reproduce.patient_train.main
    sys.argv = [fairseq_command("fairseq-generate"), *args]
    from fairseq_cli import generate  # before any of fairseq: it sets up fairseq's logging

    # generate's _main makes one stopwatch, gen_timer, for its generation loop
    generate.StopwatchMeter = cpu_stopwatch(generate.StopwatchMeter)
    generate.cli_main()
    cpu = sum(watch.cpu for watch in generate.StopwatchMeter.made)
    logging.getLogger("fairseq_cli.generate").info(CPU_LINE.format(cpu))


if __name__ == "__main__":
    main(sys.argv[1:])
