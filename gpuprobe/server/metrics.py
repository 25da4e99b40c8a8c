"""Prometheus metrics under vLLM's names, in a registry owned by one server (none global)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# vLLM's buckets, so dashboards built for vLLM read these unchanged.
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # vLLM's request latencies
FINISHED_REASONS = ("stop", "length", "abort")  # vLLM's FinishReason strings


def buckets_1_2_5(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to max_value: vLLM's buckets for per-request token counts
    (it passes max_model_len)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(m * scale)
        scale *= 10
_ITER_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_HANDOFF_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
# vLLM's NIXL connector buckets: transfer seconds, and bytes 2 KiB to 8 GiB in steps of 4x
_XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
_XFER_BYTES_BUCKETS = tuple(2 ** (10 + i) for i in range(1, 25, 2))

CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    """All metrics of one server, labelled with its model_name."""

    def __init__(self, model_name: str, max_model_len: int = 2048):
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["model_name"]
        self.model_name = model_name
        self._running = Gauge("vllm:num_requests_running", "Requests generating tokens",
                              labels, registry=r)
        self._waiting = Gauge("vllm:num_requests_waiting", "Requests waiting for their first "
                              "token", labels, registry=r)
        self._kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache block usage, 0..1", labels,
                         registry=r)
        self._prompt = Counter("vllm:prompt_tokens", "Prefilled prompt tokens", labels,
                               registry=r)
        self._gen = Counter("vllm:generation_tokens", "Generated tokens", labels, registry=r)
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token (s)",
                               labels, buckets=_TTFT_BUCKETS, registry=r)
        self._itl = Histogram("vllm:inter_token_latency_seconds", "Time between output tokens "
                              "(s)", labels, buckets=_ITL_BUCKETS, registry=r)
        self._e2e = Histogram("vllm:e2e_request_latency_seconds", "Request latency (s)", labels,
                              buckets=_E2E_BUCKETS, registry=r)
        self._iter = Histogram("vllm:iteration_tokens_total", "Tokens per engine step", labels,
                               buckets=_ITER_BUCKETS, registry=r)
        self._handoff = Histogram("gpuprobe_kv_handoff_seconds", "Prefill->decode KV handoff "
                                  "time (s)", labels, buckets=_HANDOFF_BUCKETS, registry=r)
        # The cross layout's KV transfers, under the names of vLLM's NIXL connector.
        self._xfer = Histogram("vllm:nixl_xfer_time_seconds", "Histogram of transfer duration "
                               "for KV cache transfers (cross: first byte to last, on the "
                               "decode worker).", labels, buckets=_XFER_BUCKETS, registry=r)
        self._xfer_bytes = Histogram("vllm:nixl_bytes_transferred", "Histogram of bytes "
                                     "transferred per KV cache transfer.", labels,
                                     buckets=_XFER_BYTES_BUCKETS, registry=r)
        self._layout = Gauge("gpuprobe_layout_info", "1 for the active layout",
                             ["model_name", "layout"], registry=r)
        self._share = Gauge("gpuprobe_prefill_share", "Share of compute given to prefill in "
                            "split layouts", labels, registry=r)
        self._finished = Counter("gpuprobe_requests_finished", "Finished requests by status, "
                                 "refused ones (http_4xx/5xx) included",
                                 ["model_name", "status"], registry=r)
        # vLLM's per-request metrics, fed from the request's store row so the two agree.
        self._success = Counter("vllm:request_success", "Count of successfully processed "
                                "requests.", ["model_name", "finished_reason"], registry=r)
        tokens = buckets_1_2_5(max_model_len)
        self._req_prompt = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens "
                                     "processed.", labels, buckets=tokens, registry=r)
        self._req_gen = Histogram("vllm:request_generation_tokens", "Number of generation "
                                  "tokens processed.", labels, buckets=tokens, registry=r)
        self._queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in "
                                "WAITING phase for request.", labels, buckets=_E2E_BUCKETS,
                                registry=r)
        # Load as it comes: every arrival, every refusal by reason, the admission's predicted
        # wait; and the telemetry's rows held for the store or lost (issue 52).
        self._arrived = Counter("gpuprobe_requests_arrived", "Requests that reached the "
                                "server, refused ones included", labels, registry=r)
        self._refused = Counter("gpuprobe_requests_refused", "Requests refused before they ran, "
                                "by reason (context_length_exceeded, max_in_flight, "
                                "max_queue_wait, ...)", ["model_name", "reason"], registry=r)
        self._wait = Gauge("gpuprobe_queue_predicted_wait_seconds", "Predicted wait for a first "
                           "token of a request arriving now (admission's estimate)", labels,
                           registry=r)
        self._pending = Gauge("gpuprobe_telemetry_pending_rows", "Rows held in memory for the "
                              "store (it is busy, or the next flush is due)", labels, registry=r)
        self._dropped = Counter("gpuprobe_telemetry_dropped_rows", "Rows that never reached "
                                "the store, by table", ["model_name", "table"], registry=r)
        self._dropped_seen: dict[str, int] = {}
        self._m = model_name
        for reason in FINISHED_REASONS:  # vLLM exposes every reason from the start, at 0
            self._success.labels(model_name, reason)
        # and its counters and histograms: a scraper then has a first reading to take a rate or
        # a windowed percentile from (the agent takes none from a series that first shows up
        # already counted)
        for metric in (self._prompt, self._gen, self._arrived, self._ttft, self._itl, self._e2e,
                       self._iter, self._req_prompt, self._req_gen, self._queue):
            metric.labels(model_name)

    def set_queue(self, running: int, waiting: int) -> None:
        self._running.labels(self._m).set(running)
        self._waiting.labels(self._m).set(waiting)

    def set_predicted_wait(self, seconds: float) -> None:
        self._wait.labels(self._m).set(seconds)

    def set_telemetry(self, num_pending: int, num_dropped: dict[str, int]) -> None:
        """The telemetry writer's figures, read at each scrape."""
        self._pending.labels(self._m).set(num_pending)
        for table, n in num_dropped.items():
            counter = self._dropped.labels(self._m, table)
            if n > self._dropped_seen.get(table, 0):
                counter.inc(n - self._dropped_seen.get(table, 0))
                self._dropped_seen[table] = n

    def set_kv_usage(self, fraction: float) -> None:
        self._kv.labels(self._m).set(fraction)

    def set_layout(self, layout: str, prefill_share: float | None, all_layouts: tuple) -> None:
        for name in all_layouts:
            self._layout.labels(self._m, name).set(1 if name == layout else 0)
        self._share.labels(self._m).set(prefill_share if prefill_share is not None else 0)

    def on_step(self, num_tokens: int) -> None:
        self._iter.labels(self._m).observe(num_tokens)

    def on_first_token(self, ttft_s: float, prompt_tokens: int) -> None:
        self._ttft.labels(self._m).observe(ttft_s)
        self._prompt.labels(self._m).inc(prompt_tokens)

    def on_token(self, gap_s: float | None) -> None:
        self._gen.labels(self._m).inc()
        if gap_s is not None:
            self._itl.labels(self._m).observe(gap_s)

    def on_handoff(self, seconds: float) -> None:
        self._handoff.labels(self._m).observe(seconds)

    def on_kv_transfer(self, seconds: float, nbytes: int) -> None:
        self._xfer.labels(self._m).observe(seconds)
        self._xfer_bytes.labels(self._m).observe(nbytes)

    def on_finish(self, e2e_s: float, status: str) -> None:
        self._e2e.labels(self._m).observe(e2e_s)
        self._finished.labels(self._m, status).inc()

    def on_request(self, finished_reason: str, record: dict) -> None:
        """vLLM's per-request metrics from a finished request's store row. vLLM counts a
        request ending in stop, length or abort; one that failed (status error) is not."""
        self._success.labels(self._m, finished_reason).inc()
        self._req_prompt.labels(self._m).observe(record["prompt_tokens"])
        self._req_gen.labels(self._m).observe(record["output_tokens"])
        if record["queue_s"] is not None:
            self._queue.labels(self._m).observe(record["queue_s"])

    def on_arrival(self) -> None:
        self._arrived.labels(self._m).inc()

    def on_rejected(self, status: str, reason: str) -> None:
        """A request refused before it ran (http_400, http_429, ...): counted by status among
        the finished and by reason among the refused."""
        self._finished.labels(self._m, status).inc()
        self._refused.labels(self._m, reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
