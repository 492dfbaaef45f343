"""fairseq-generate that also logs its decoding time on the process's CPU clock
(``Decoding CPU time: Ys``, after fairseq's own line; nothing else changes).

fairseq times its generation loop on the wall clock, which reads the machine's load: the same
model decoded beside a training takes up to twice as long. The process's CPU seconds over the
same intervals hardly depend on the load (one thread), as the training's CPU seconds do.
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


def main(args: Sequence[str]) -> None:
    """Run fairseq-generate with ``args``, then log its generation loop's CPU seconds."""
    # As fairseq-generate itself (the plugin's one-line errors, argparse's program name):
    # see scripts.reproduce.patient_train.main
    sys.argv = [fairseq_command("fairseq-generate"), *args]
    from fairseq_cli import generate  # before any of fairseq: it sets up fairseq's logging

    cpu = [0.0]  # this process's CPU seconds over the intervals the stopwatches time

    # generate's _main makes one stopwatch, gen_timer, for its generation loop
    class CPUStopwatch(generate.StopwatchMeter):  # type: ignore[misc, name-defined]
        def start(self) -> None:
            self.cpu_start = time.process_time()
            super().start()

        def stop(self, n: Any = 1, prehook: Any = None) -> None:
            super().stop(n, prehook)
            if getattr(self, "cpu_start", None) is not None:
                cpu[0] += time.process_time() - self.cpu_start
                self.cpu_start = None

    generate.StopwatchMeter = CPUStopwatch
    generate.cli_main()
    logging.getLogger("fairseq_cli.generate").info(CPU_LINE.format(cpu[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
