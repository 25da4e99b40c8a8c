"""Putting arrivals in order while streaming, in bounded memory.

Policy (documented in the import help): rows out of order by less than `window_rows` rows are
sorted into place and counted as `reordered` (a warning, not an error: traces merged from several
front ends jitter like this). A row earlier than rows already written is a broken row: it stops
the import, or is skipped with --skip-bad. Equal timestamps are legal (same-time arrivals) and
keep their file order (stable sort).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from gpuprobe.workloads.badrows import BadRows
from gpuprobe.workloads.chunk import concat, size, take

WINDOW_ROWS = 100_000


class ReorderWindow:
    def __init__(self, bad: BadRows, time_field: str, window_rows: int = WINDOW_ROWS):
        self._bad, self._field, self._window = bad, time_field, window_rows
        self._buf: dict | None = None
        self._last_written_s = -np.inf
        self._max_seen_s = -np.inf
        self.num_reordered = 0

    def push(self, chunk: dict) -> Iterator[dict]:
        arrival = chunk["arrival_s"]
        late = arrival < self._last_written_s
        for i in np.flatnonzero(late):
            self._bad.reject(int(chunk["line"][i]), self._field,
                             f"{arrival[i]:.6f} is earlier than rows already imported (out of order by more "
                             f"than {self._window:,} rows)", reason=f"field {self._field}: too far out of order")
        if late.any():
            chunk = take(chunk, ~late)
            arrival = chunk["arrival_s"]
        if arrival.size:
            running = np.maximum.accumulate(np.concatenate([[self._max_seen_s], arrival]))
            self.num_reordered += int((arrival < running[:-1]).sum())
            self._max_seen_s = float(running[-1])
        in_order = arrival.size == 0 or (bool((arrival[1:] >= arrival[:-1]).all()) and
                                         (not size(self._buf) or arrival[0] >= self._buf["arrival_s"][-1]))
        buf = concat(self._buf, chunk)
        if not in_order:  # a stable sort of rows already in order would keep them as they are
            buf = take(buf, np.argsort(buf["arrival_s"], kind="stable"))
        excess = size(buf) - self._window
        if excess > 0:
            ready, self._buf = take(buf, slice(0, excess)), take(buf, slice(excess, None))
            self._last_written_s = float(ready["arrival_s"][-1])
            yield ready
        else:
            self._buf = buf

    def flush(self) -> Iterator[dict]:
        if size(self._buf):
            yield self._buf
        self._buf = None
