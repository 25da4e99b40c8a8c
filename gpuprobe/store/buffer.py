"""A bounded in-memory buffer of rows on their way to the store.

When the store cannot take a batch (locked by another process, disk full) the rows stay here
and go with the next flush; past `max_rows` the oldest go first and are counted in
`num_dropped`. The agent keeps its samples in one, the server's telemetry its request, step
and event rows. Nothing here raises on a full buffer.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Generic, Iterable, TypeVar

from gpuprobe.errors import StoreError

Row = TypeVar("Row")


class RowBuffer(Generic[Row]):
    def __init__(self, max_rows: int = 100_000):
        self.max_rows = max(1, int(max_rows))
        self._rows: deque[Row] = deque()
        self.num_produced = 0  # every row ever added
        self.num_written = 0  # confirmed in the store
        self.num_dropped = 0  # thrown away because the buffer was full
        self.last_error: str | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rows: Iterable[Row]) -> None:
        before = len(self._rows)
        self._rows.extend(rows)
        self.num_produced += len(self._rows) - before
        self._trim()

    def _trim(self) -> None:
        excess = len(self._rows) - self.max_rows
        for _ in range(max(0, excess)):
            self._rows.popleft()
        self.num_dropped += max(0, excess)

    def take(self) -> list[Row]:
        rows = list(self._rows)
        self._rows.clear()
        return rows

    def put_back(self, rows: list[Row]) -> None:
        """Return a batch the store refused; it goes before anything added meanwhile."""
        self._rows.extendleft(reversed(rows))
        self._trim()

    def refused(self, rows: list[Row], exc: Exception) -> None:
        """The store refused a batch taken with take(): keep it (bounded) and remember why."""
        self.put_back(rows)
        self.last_error = str(exc)

    def written(self, num_rows: int) -> None:
        self.num_written += num_rows
        self.last_error = None

    def flush_with(self, write: Callable[[list[Row]], int]) -> int:
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
