"""A bounded in-memory buffer between the samplers and the store.

When the store cannot take a batch (locked by another process, disk full) the rows stay here;
past `max_samples` the oldest go first and are counted in `num_dropped`
(exported as gpuprobe_agent_dropped_samples_total). Nothing here raises on a full buffer.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from gpuprobe.errors import StoreError
from gpuprobe.store import Sample


class SampleBuffer:
    def __init__(self, max_samples: int = 100_000):
        self.max_samples = max(1, int(max_samples))
        self._rows: deque[Sample] = deque()
        self.num_produced = 0  # every sample ever added
        self.num_written = 0  # confirmed in the store
        self.num_dropped = 0  # thrown away because the buffer was full
        self.last_error: str | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rows: Iterable[Sample]) -> None:
        before = len(self._rows)
        self._rows.extend(rows)
        self.num_produced += len(self._rows) - before
        self._trim()

    def _trim(self) -> None:
        excess = len(self._rows) - self.max_samples
        for _ in range(max(0, excess)):
            self._rows.popleft()
        self.num_dropped += max(0, excess)

    def take(self) -> list[Sample]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    def put_back(self, rows: list[Sample]) -> None:
        """Return a batch the store refused; it goes before anything added meanwhile."""
        self._rows.extendleft(reversed(rows))
        self._trim()

    def refused(self, rows: list[Sample], exc: Exception) -> None:
        """The store refused a batch taken with take(): keep it (bounded) and remember why."""
        self.put_back(rows)
        self.last_error = str(exc)

    def written(self, num_rows: int) -> None:
        self.num_written += num_rows
        self.last_error = None

    def flush_with(self, write: Callable[[list[Sample]], int]) -> int:
        """Write everything or keep it; returns rows written (0 when the store refused)."""
        rows = self.take()
        if not rows:
            return 0
        try:
            write(rows)
        except StoreError as exc:
            self.refused(rows, exc)
            return 0
        self.written(len(rows))
        return len(rows)
