"""Stop fairseq's background batch threads at exit: a run that ended mid-epoch while its daemon
thread was inside torch aborted (SIGABRT) after its work was done. ``atexit`` runs before
daemon threads die. No probe: a race at exit (a test shows it)."""

from __future__ import annotations

import atexit
import functools
import queue
import threading
import time
import weakref
from typing import Iterable, Iterator

from relu_former.fairseq_fixes import wrap_once

_consumers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _until_stopped(source: Iterable, stop: threading.Event) -> Iterator:
    iterator = iter(source)
    while not stop.is_set():
        try:
            yield next(iterator)
        except StopIteration:
            return


def stop_batch_threads(timeout_s: float = 10.0) -> None:
    """Stop every live ``BackgroundConsumer`` after its current batch and join it."""
    consumers = list(_consumers)
    for consumer in consumers:
        consumer._relu_former_stop.set()
    deadline = time.monotonic() + timeout_s
    for consumer in consumers:
        while consumer.is_alive() and time.monotonic() < deadline:
            try:  # unblock a put on a full queue
                while True:
                    consumer._queue.get_nowait()
            except queue.Empty:
                pass
            consumer.join(0.05)


def _stoppable_consumer(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._relu_former_stop = threading.Event()
        self._source = _until_stopped(self._source, self._relu_former_stop)
        _consumers.add(self)

    return __init__


def stop_batch_threads_at_exit() -> None:
    """Make fairseq's ``BackgroundConsumer`` stoppable and stop them at exit (idempotent)."""
    from fairseq.data import iterators

    wrap_once(iterators.BackgroundConsumer, "__init__", _stoppable_consumer)
    atexit.unregister(stop_batch_threads)
    atexit.register(stop_batch_threads)
