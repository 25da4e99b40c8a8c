"""A drift-free periodic loop for asyncio: ticks stay on a fixed grid whatever a tick costs.

    await every(1.0, collect_once)     # runs until cancelled

`next_tick += interval; sleep(max(0, next_tick - now))`: a slow tick delays only itself, and
a loop that fell more than one interval behind (a stalled disk, a suspended VM) skips ahead
instead of firing a burst of catch-up ticks.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable


async def every(interval_s: float, tick: Callable[[], Any], clock: Callable[[], float] = time.monotonic,
                on_error: Callable[[BaseException], None] | None = None,
                sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
    """Call `tick()` (sync or async) every `interval_s` seconds until cancelled.

    An exception in a tick goes to `on_error` (if given) and the loop goes on: one source's
    failure must not stop the others. `clock` and `sleep` are the time it runs on (a test's
    own, so the grid is checked without racing the machine's).
    """
    next_tick = clock()
    while True:
        try:
            result = tick()
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if on_error is None:
                raise
            on_error(exc)
        next_tick += interval_s
        now = clock()
        if next_tick < now - interval_s:
            next_tick = now
        await sleep(max(0.0, next_tick - now))
