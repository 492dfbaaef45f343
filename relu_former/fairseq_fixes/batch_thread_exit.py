"""Stop fairseq's background batch thread before the interpreter shuts down.

fairseq 0.12's ``BufferedIterator`` fills its queue from a daemon thread
(``BackgroundConsumer``). A training that stops mid-epoch exits while that thread is inside a
torch call, and the interpreter's unwind of it aborts the process (``terminate called without
an active exception``, SIGABRT) after its work is done: about one short run in a few hundred
on a loaded 2-core machine. ``atexit`` runs before daemon threads are ended, so each live
consumer is told to stop after its batch, its queue drained, and joined. No probe: the fault
is a race at exit, and the change does nothing before it.
"""

from __future__ import annotations

import atexit
import functools
import queue
import threading
import time
import weakref
from typing import Iterable, Iterator

_consumers: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
JOIN_TIMEOUT_S = 10.0


def _until_stopped(source: Iterable, stop: threading.Event) -> Iterator:
    iterator = iter(source)
    while not stop.is_set():
        try:
            item = next(iterator)
        except StopIteration:
            return
        yield item


def _drain(pending: queue.Queue) -> None:
    try:
        while True:
            pending.get_nowait()
    except queue.Empty:
        pass


def stop_batch_threads(timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Stop every live ``BackgroundConsumer`` after its current batch and join it."""
    consumers = list(_consumers)
    for consumer in consumers:
        consumer._relu_former_stop.set()
    deadline = time.monotonic() + timeout_s
    for consumer in consumers:
        while consumer.is_alive() and time.monotonic() < deadline:
            _drain(consumer._queue)
            consumer.join(0.05)


def _stoppable_consumer(init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if hasattr(self, "_source") and isinstance(getattr(self, "_queue", None), queue.Queue):
            self._relu_former_stop = threading.Event()
            self._source = _until_stopped(self._source, self._relu_former_stop)
            _consumers.add(self)

    return __init__


def stop_batch_threads_at_exit() -> bool:
    """Make fairseq's ``BackgroundConsumer`` stoppable and stop them at exit; True if installed.

    Idempotent. Does nothing on a fairseq whose consumer lacks the attributes relied on.
    """
    from fairseq.data import iterators

    from relu_former.fairseq_fixes.wrap_once import wrap_once

    consumer = getattr(iterators, "BackgroundConsumer", None)
    if consumer is None or not hasattr(consumer, "run"):
        return False
    wrap_once(consumer, "__init__", _stoppable_consumer)
    atexit.unregister(stop_batch_threads)
    atexit.register(stop_batch_threads)
    return True
