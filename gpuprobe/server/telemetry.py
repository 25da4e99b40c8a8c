"""Request, step, arrival and event records -> the store, batched, from a background thread.

The event loop only appends dicts to a queue; one thread owns the Store and writes whatever
has accumulated every `flush_interval_s`, so a slow disk never stalls token streaming. When
the store is busy (another process holds its write lock, the disk is full) the rows wait in
memory, at most `max_pending_rows` per table, and go with a later flush; past that the oldest
go first, counted (`num_dropped`, /metrics) and recorded as a `telemetry_dropped` event once
the store takes writes again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import numpy as np

from gpuprobe.errors import StoreError
from gpuprobe.store.buffer import RowBuffer

log = logging.getLogger("gpuprobe.server")

TABLES = ("arrivals", "requests", "steps", "layout_events", "events")
MAX_PENDING_ROWS = 50_000  # per table: minutes of a busy server's steps, tens of MB at most
BUSY_TIMEOUT_S = 1.0  # a flush gives up on a locked store this fast; its rows wait for the next
CLOSE_RETRY_S = 20.0  # at shutdown, how long a busy store is retried before rows are given up


def request_record(run_id: str, host: str, model: str, layout: str, rid: str, *,
                   arrival_s: float, prompt_tokens: int, token_times_s: list[float],
                   dispatch_s: float | None, prefill_start_s: float | None,
                   prefill_end_s: float | None, kv_handoff_s: float | None,
                   kv_handoff_bytes: int | None, finish_s: float, status: str,
                   error: str | None, kv_recv_cpu_s: float | None = None,
                   kv_xfer_s: float | None = None) -> dict:
    """A `requests` row. Times are epoch seconds; token_times are offsets from arrival (s)."""
    first = token_times_s[0] if token_times_s else None
    gaps = np.diff(token_times_s) if len(token_times_s) > 1 else None
    return {
        "run_id": run_id, "source": "server", "request_id": rid, "host": host, "model": model,
        "layout": layout, "arrival_s": arrival_s, "prompt_tokens": prompt_tokens,
        "output_tokens": len(token_times_s),
        "queue_s": (prefill_start_s - arrival_s) if prefill_start_s else
        ((dispatch_s - arrival_s) if dispatch_s else None),
        "prefill_start_s": prefill_start_s, "prefill_end_s": prefill_end_s,
        "kv_handoff_s": kv_handoff_s, "kv_handoff_bytes": kv_handoff_bytes,
        "kv_recv_cpu_s": kv_recv_cpu_s, "kv_xfer_s": kv_xfer_s,
        "first_token_s": first, "ttft_s": (first - arrival_s) if first else None,
        "tbt_p50_s": float(np.percentile(gaps, 50)) if gaps is not None else None,
        "tbt_p99_s": float(np.percentile(gaps, 99)) if gaps is not None else None,
        "tbt_max_s": float(gaps.max()) if gaps is not None else None,
        "finish_s": finish_s, "e2e_s": finish_s - arrival_s, "status": status, "error": error,
        "token_times": [round(t - arrival_s, 6) for t in token_times_s],
    }


def rejected_record(run_id: str, host: str, model: str, rid: str, *, arrival_s: float,
                    prompt_tokens: int | None, finish_s: float, status: str, error: str) -> dict:
    """A `requests` row for a request refused before it ran (status http_<code>)."""
    return {"run_id": run_id, "source": "server", "request_id": rid, "host": host,
            "model": model, "arrival_s": arrival_s, "prompt_tokens": prompt_tokens,
            "output_tokens": 0, "finish_s": finish_s, "e2e_s": finish_s - arrival_s,
            "status": status, "error": error[:500], "token_times": []}


def arrival_record(run_id: str, host: str, rid: str, *, arrival_s: float,
                   prompt_tokens: int | None, max_tokens: int | None, status: str,
                   reason: str | None, num_in_flight: int, num_waiting: int) -> dict:
    """An `arrivals` row, written when a request arrives (admitted, or refused with the
    reason): load is visible before any request finishes. num_in_flight / num_waiting: what
    the server held when it came (waiting: no first token yet)."""
    return {"run_id": run_id, "source": "server", "host": host, "request_id": rid,
            "arrival_s": arrival_s, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens,
            "status": status, "reason": reason, "num_in_flight": num_in_flight,
            "num_waiting": num_waiting}


class TelemetryWriter:
    """Owns a Store in a thread; the add_* methods are cheap and thread-safe."""

    def __init__(self, store_path: str | None, run_id: str, host: str, meta: dict,
                 flush_interval_s: float = 0.5, max_pending_rows: int = MAX_PENDING_ROWS,
                 busy_timeout_s: float = BUSY_TIMEOUT_S, close_retry_s: float = CLOSE_RETRY_S):
        self.run_id, self.host = run_id, host
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._interval, self._busy_timeout_s = flush_interval_s, busy_timeout_s
        self._close_retry_s = close_retry_s
        self._buffers = {t: RowBuffer(max_pending_rows) for t in TABLES}
        self._num_lost = dict.fromkeys(TABLES, 0)      # rows the store can never take, or
        self._num_reported = dict.fromkeys(TABLES, 0)  # given up at shutdown; dropped, recorded
        self._busy_since: float | None = None
        self._num_in_flight = 0  # rows taken for a write not yet confirmed or put back
        self._held = threading.Lock()  # moves between queue, buffers and a write, for counting
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: Exception | None = None
        self._store_path, self._meta = store_path, meta
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error:
            raise self._error

    def add_request(self, record: dict) -> None:
        self._queue.put(("requests", record))

    def add_step(self, record: dict) -> None:
        self._queue.put(("steps", record))

    def add_layout_event(self, record: dict) -> None:
        self._queue.put(("layout_events", record))

    def add_arrival(self, record: dict) -> None:
        self._queue.put(("arrivals", record))

    def add_event(self, kind: str, message: str) -> None:
        """An `events` row from the server (source 'server'): lease changes, lost rows."""
        self._queue.put(("events", {"ts_s": time.time(), "host": self.host, "source": "server",
                                    "device": "", "kind": kind, "message": message}))

    @property
    def num_written(self) -> dict[str, int]:
        return {t: b.num_written for t, b in self._buffers.items()}

    @property
    def num_dropped(self) -> dict[str, int]:
        """Rows that never reached the store, per table (0 while nothing was lost)."""
        return {t: b.num_dropped + self._num_lost[t] for t, b in self._buffers.items()}

    def num_pending(self) -> int:
        """Rows waiting for the store (held while it is busy, or not yet flushed)."""
        with self._held:
            return (sum(len(b) for b in self._buffers.values()) + self._num_in_flight
                    + self._queue.qsize())

    def close(self) -> None:
        """Flush everything queued (retrying a busy store for close_retry_s) and stop."""
        self._stop.set()
        self._thread.join(self._close_retry_s + 10)

    def _run(self) -> None:
        from gpuprobe.store import Store

        try:
            store = Store.open(self._store_path, busy_timeout_s=self._busy_timeout_s)
            store.start_run(self.run_id, "serve", self.host, self._meta)
        except Exception as exc:  # noqa: BLE001 - surfaced to the constructor
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.wait(self._interval):
                self._flush(store)
            self._flush_at_close(store)
        finally:
            store.close()

    def _flush_at_close(self, store) -> None:
        deadline = time.monotonic() + self._close_retry_s
        self._flush(store)
        while self.num_pending() and time.monotonic() < deadline:
            time.sleep(self._interval)
            self._flush(store)
        left = {t: len(b) for t, b in self._buffers.items() if len(b)}
        if left:
            for table, n in left.items():
                self._buffers[table].take()
                self._num_lost[table] += n
            log.error("telemetry: %s not written: the store stayed busy for %.0f s at shutdown",
                      _rows_text(left), self._close_retry_s)
        try:
            store.end_run(self.run_id)
        except StoreError as exc:
            log.warning("telemetry: the run's end time not written: %s", exc)

    def _flush(self, store) -> None:
        while True:  # into the bounded buffers first: a busy store must not grow the queue
            with self._held:
                try:
                    table, record = self._queue.get_nowait()
                except queue.Empty:
                    break
                self._buffers[table].add([record])
        writers = {"requests": store.insert_requests, "steps": store.insert_steps,
                   "layout_events": store.insert_layout_events,
                   "events": store.insert_events, "arrivals": store.insert_arrivals}
        for table in TABLES:
            if not self._write(table, writers[table]):
                return  # the store is busy: the other tables wait for the next flush too
        self._report_drops(store)

    def _write(self, table: str, write) -> bool:
        """Write one table's held rows; False when the store was busy (the rows kept)."""
        buf = self._buffers[table]
        with self._held:
            rows = buf.take()
            self._num_in_flight = len(rows)
        if not rows:
            return True
        try:
            write(rows)
        except StoreError as exc:
            with self._held:
                buf.refused(rows, exc)
                self._num_in_flight = 0
            if self._busy_since is None:
                self._busy_since = time.monotonic()
                log.warning("telemetry: the store is busy (%s): holding rows in memory, at most "
                            "%d per table", exc, buf.max_rows)
            return False
        except Exception as exc:  # noqa: BLE001 - a row the store can never take: not retried
            with self._held:
                self._num_in_flight = 0
            self._num_lost[table] += len(rows)
            log.error("telemetry: %d %s rows refused by the store: %s", len(rows), table, exc)
            return True
        with self._held:
            buf.written(len(rows))
            self._num_in_flight = 0
        if self._busy_since is not None:
            log.warning("telemetry: the store takes writes again after %.1f s",
                        time.monotonic() - self._busy_since)
            self._busy_since = None
        return True

    def _report_drops(self, store) -> None:
        """Record rows lost since the last report as one event (the store takes writes now)."""
        dropped = self.num_dropped
        new = {t: n - self._num_reported[t] for t, n in dropped.items() if n > self._num_reported[t]}
        if not new:
            return
        msg = (f"telemetry dropped {_rows_text(new)}: the store was busy and at most "
               f"{self._buffers['steps'].max_rows} rows per table are held in memory")
        try:
            store.insert_events([{"ts_s": time.time(), "host": self.host, "source": "server",
                                  "device": "", "kind": "telemetry_dropped", "message": msg}])
        except StoreError:
            return  # told with the next flush
        self._num_reported = dropped
        log.warning("%s", msg)


def _rows_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {t} rows" for t, n in counts.items())


def step_record(run_id: str, host: str, layout: str, worker: str, rec: dict) -> dict:
    """A `steps` row from a worker's StepRecord dict (start_s already epoch seconds)."""
    keys = ("role", "start_s", "duration_s", "num_prefill_seqs", "num_prefill_tokens",
            "num_decode_seqs", "num_decode_ctx_tokens", "num_decode_padded_tokens",
            "prefill_q_tokens2", "kv_blocks_used", "kv_blocks_total", "num_preempted")
    return {"run_id": run_id, "host": host, "layout": layout, "worker": worker,
            **{k: rec.get(k) for k in keys}}
