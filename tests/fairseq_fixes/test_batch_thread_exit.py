"""A process whose fairseq batch thread is busy in torch when it exits ends cleanly."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO_ROOT

# The consumer never blocks (its queue holds every batch) and each batch is many small torch
# calls, so at exit the daemon thread is almost always inside torch, as after a
# ``--max-update`` that ends mid-epoch on a loaded machine.
EXIT_WHILE_COLLATING = textwrap.dedent("""
    import sys, time
    import torch
    from fairseq.data import iterators
    if sys.argv[1] == "with-plugin":
        import relu_former.plugin
    torch.set_num_threads(1)

    class Batches:
        def __len__(self):
            return 10 ** 6

        def __iter__(self):
            rows = torch.randn(200, 200)
            while True:
                yield torch.stack([rows[i] for i in range(0, 200, 7)]) @ rows

    batches = iterators.BufferedIterator(10 ** 6, Batches())
    next(batches)
    time.sleep(0.3)
    print("done")
""")
TRIALS = 3


def _exit_statuses(mode: str) -> list[tuple[int, str]]:
    procs = [subprocess.Popen([sys.executable, "-c", EXIT_WHILE_COLLATING, mode], cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(TRIALS)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        results.append((proc.returncode, out + err))
    return results


@pytest.mark.slow
def test_exit_with_a_busy_batch_thread_is_clean_with_the_plugin():
    for status, output in _exit_statuses("with-plugin"):
        assert status == 0, output
        assert "done" in output and "terminate called" not in output


@pytest.mark.slow
def test_without_the_plugin_the_same_exit_aborts():
    # the failure the fix removes: SIGABRT from C++ terminate after the work is done
    results = _exit_statuses("fairseq-only")
    aborted = [output for status, output in results if status == -6]
    assert aborted, results
    assert all("terminate called without an active exception" in o for o in aborted)


def test_stop_joins_a_consumer_blocked_on_a_full_queue():
    from fairseq.data import iterators

    import relu_former.plugin  # noqa: F401  (makes the consumers stoppable)
    from relu_former.fairseq_fixes.batch_thread_exit import stop_batch_threads

    class Endless:
        def __len__(self):
            return 10 ** 6

        def __iter__(self):
            n = 0
            while True:
                n += 1
                yield n

    batches = iterators.BufferedIterator(2, Endless())
    assert [next(batches) for _ in range(3)] == [1, 2, 3]  # batches arrive in order, as before
    consumer = batches._consumer
    assert consumer.is_alive()  # blocked on its full queue
    stop_batch_threads(timeout_s=5.0)
    assert not consumer.is_alive()
