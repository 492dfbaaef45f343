"""Stop fairseq's background batch thread before the interpreter shuts down.

In fairseq-fixed 0.12.3.1 (as in fairseq 0.12.x), ``BufferedIterator`` (``--data-buffer-size``,
default 10) fills its queue from a daemon thread, ``BackgroundConsumer``. When training stops
in the middle of an epoch (``--max-update``, ``--stop-time-hours``, an error), that thread is
still collating the next batches while Python exits. A daemon thread that is inside a torch
call at that moment is ended by the interpreter with an unwind that cannot cross torch's C++
frames, and the process dies with ``terminate called without an active exception`` (SIGABRT,
exit status 134 or -6) after its work is done, so a caller sees a failed run. On a loaded
2-core machine this hit about one short ``fairseq-train`` in a few hundred; a daemon thread
caught in a torch call aborts nine exits in ten.

``atexit`` handlers run before daemon threads are ended, so at exit each live consumer is
told to stop after the batch it is making, its queue is drained (a blocked ``put`` returns),
and it is joined. Only fairseq's own class is touched; its queue, its count and its sentinel
behave as before while the process runs. There is no probe: the fault is a race at exit, and
the change does nothing before it.
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
