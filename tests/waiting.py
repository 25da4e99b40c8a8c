"""Tests wait on conditions, not on the clock: poll until something holds, with a generous
deadline, so a crowded machine makes a test slower, never red."""
from __future__ import annotations

import time


def wait_for(fn, what: str, timeout_s: float = 60.0, every_s: float = 0.1):
    """fn()'s first truthy answer, polled every every_s; AssertionError naming `what` after
    timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := fn():
            return got
        time.sleep(every_s)
    raise AssertionError(f"never saw {what} in {timeout_s:.0f} s")
