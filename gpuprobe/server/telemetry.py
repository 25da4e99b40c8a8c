"""Request and step records -> the store, batched, from a background thread.

The event loop only appends dicts to a queue; one thread owns the Store and writes whatever
has accumulated every `flush_interval_s`, so a slow disk never stalls token streaming.
"""

from __future__ import annotations

import logging
import queue
import threading

import numpy as np

log = logging.getLogger("gpuprobe.server")


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


class TelemetryWriter:
    """Owns a Store in a thread; add_request/add_step are cheap and thread-safe."""

    def __init__(self, store_path: str | None, run_id: str, host: str, meta: dict,
                 flush_interval_s: float = 0.5):
        self.run_id, self.host = run_id, host
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._interval = flush_interval_s
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: Exception | None = None
        self._store_path, self._meta = store_path, meta
        self.num_written = {"requests": 0, "steps": 0, "layout_events": 0}
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

    def close(self) -> None:
        """Flush everything queued and stop the thread."""
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        from gpuprobe.store import Store

        try:
            store = Store.open(self._store_path)
            store.start_run(self.run_id, "serve", self.host, self._meta)
        except Exception as exc:  # noqa: BLE001 - surfaced to the constructor
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.wait(self._interval):
                self._flush(store)
            self._flush(store)
            store.end_run(self.run_id)
        finally:
            store.close()

    def _flush(self, store) -> None:
        batches: dict[str, list] = {"requests": [], "steps": [], "layout_events": []}
        while True:
            try:
                table, record = self._queue.get_nowait()
            except queue.Empty:
                break
            batches[table].append(record)
        writers = {"requests": store.insert_requests, "steps": store.insert_steps,
                   "layout_events": store.insert_layout_events}
        for table, records in batches.items():
            if not records:
                continue
            try:
                writers[table](records)
                self.num_written[table] += len(records)
            except Exception as exc:  # noqa: BLE001 - telemetry must never take serving down
                log.warning("telemetry: dropped %d %s rows: %s", len(records), table, exc)


def step_record(run_id: str, host: str, layout: str, worker: str, rec: dict) -> dict:
    """A `steps` row from a worker's StepRecord dict (start_s already epoch seconds)."""
    keys = ("role", "start_s", "duration_s", "num_prefill_seqs", "num_prefill_tokens",
            "num_decode_seqs", "num_decode_ctx_tokens", "num_decode_padded_tokens",
            "prefill_q_tokens2", "kv_blocks_used", "kv_blocks_total", "num_preempted")
    return {"run_id": run_id, "host": host, "layout": layout, "worker": worker,
            **{k: rec.get(k) for k in keys}}
