"""A process whose fairseq batch thread is busy in torch when it exits ends cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO_ROOT

# The consumer never blocks (its queue holds every batch) and each batch is many small torch
# calls, so at exit the daemon thread is almost always inside torch, as after a
# ``--max-update`` that ends mid-epoch on a loaded machine. One interpreter imports torch and
# fairseq (most of a trial's time) and forks the trials, TRIALS at once, without the plugin and
# then with it: each child runs the script's end and exits as a process does (atexit,
# interpreter finalisation, C++ static destructors), its output in a file of its own; the
# parent prints each mode's exit statuses and outputs.
EXIT_WHILE_COLLATING = textwrap.dedent("""
    import json, os, sys, tempfile, time
    import torch
    from fairseq.data import iterators

    def trials(count):
        logs, pids = [], []
        for _ in range(count):
            logs.append(tempfile.TemporaryFile())
            pids.append(os.fork())
            if pids[-1] == 0:  # a trial
                os.dup2(logs[-1].fileno(), 1)
                os.dup2(logs[-1].fileno(), 2)
                return None
        found = []
        for pid, log in zip(pids, logs):
            status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            log.seek(0)
            found.append((status, log.read().decode(errors="replace")))
        return found

    results = {}
    for mode in ("fairseq-only", "with-plugin"):
        if mode == "with-plugin":
            import relu_former.plugin
        results[mode] = trials(int(sys.argv[1]))
        if results[mode] is None:
            break
    else:
        print(json.dumps(results))
        sys.exit(0)
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


@pytest.fixture(scope="module")
def exits() -> dict:
    """For each mode, ``fairseq-only`` and ``with-plugin``, each trial's exit status and
    output."""
    proc = subprocess.run([sys.executable, "-c", EXIT_WHILE_COLLATING, str(TRIALS)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_exit_with_a_busy_batch_thread_is_clean_with_the_plugin(exits):
    for status, output in exits["with-plugin"]:
        assert status == 0, output
        assert "done" in output and "terminate called" not in output


@pytest.mark.slow
def test_without_the_plugin_the_same_exit_aborts(exits):
    # the failure the fix removes: SIGABRT from C++ terminate after the work is done
    results = exits["fairseq-only"]
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
