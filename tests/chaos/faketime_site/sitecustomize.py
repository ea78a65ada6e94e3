"""Imported at start-up by node processes run under libfaketime (this directory is put first
on their PYTHONPATH by tests/chaos/test_clock.py; nothing else loads it).

With the monotonic clock faked too, every timed lock wait in Python 3.11 here hangs
(``threading.Event().wait(0.5)`` never returns: glibc's ``sem_clockwait`` gets a faked
deadline), so the nodes run with ``FAKETIME_DONT_FAKE_MONOTONIC=1``: only the wall clock is
off, as on a real host whose clock is wrong. In that mode libfaketime's ``clock_nanosleep``
makes ``time.sleep`` fail with EINVAL; this sleeps the same monotonic duration on an Event.
"""

import os
import threading
import time

if os.environ.get("FAKETIME") and os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1":

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        threading.Event().wait(seconds)

    time.sleep = _sleep
