"""Prometheus text from vLLM, SGLang and TGI -> one vocabulary, as plain numbers.

`parse(text)` gives a Snapshot: gauges and counters keyed by (our name, model), histograms as
cumulative bucket counts. Old and new vLLM names map to the same name (for example
vllm:time_per_output_token_seconds and vllm:inter_token_latency_seconds are both `itl`).
`window()` turns two snapshots into rates and windowed quantiles (engine.py stores them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# family name as the parser gives it (counters without _total) -> (kind, our name, scale)
# Scale turns the engine's unit into ours: a 0..1 fraction into a percentage.
NAMES: dict[str, tuple[str, str, float]] = {
    # vLLM (V1 names and the older V0 ones)
    "vllm:num_requests_running": ("gauge", "num_requests_running", 1.0),
    "vllm:num_requests_waiting": ("gauge", "num_requests_waiting", 1.0),
    "vllm:kv_cache_usage_perc": ("gauge", "kv_cache_usage_pct", 100.0),
    "vllm:gpu_cache_usage_perc": ("gauge", "kv_cache_usage_pct", 100.0),
    "vllm:prompt_tokens": ("counter", "prompt_tokens_per_s", 1.0),
    "vllm:generation_tokens": ("counter", "generation_tokens_per_s", 1.0),
    "vllm:request_success": ("counter", "requests_finished_per_s", 1.0),
    "vllm:num_preemptions": ("counter", "preemptions_per_s", 1.0),
    "vllm:time_to_first_token_seconds": ("histogram", "ttft", 1.0),
    "vllm:inter_token_latency_seconds": ("histogram", "itl", 1.0),
    "vllm:time_per_output_token_seconds": ("histogram", "itl", 1.0),
    "vllm:e2e_request_latency_seconds": ("histogram", "e2e_latency", 1.0),
    "vllm:request_queue_time_seconds": ("histogram", "queue_time", 1.0),
    "vllm:request_prefill_time_seconds": ("histogram", "prefill_time", 1.0),
    "vllm:request_decode_time_seconds": ("histogram", "decode_time", 1.0),
    # gpuprobe serve (besides vLLM's names; its finished requests are read from
    # vllm:request_success, since gpuprobe_requests_finished also counts refusals)
    "gpuprobe_kv_handoff_seconds": ("histogram", "kv_handoff", 1.0),
    # SGLang
    "sglang:num_running_reqs": ("gauge", "num_requests_running", 1.0),
    "sglang:num_queue_reqs": ("gauge", "num_requests_waiting", 1.0),
    "sglang:token_usage": ("gauge", "kv_cache_usage_pct", 100.0),
    "sglang:prompt_tokens": ("counter", "prompt_tokens_per_s", 1.0),
    "sglang:generation_tokens": ("counter", "generation_tokens_per_s", 1.0),
    "sglang:num_requests": ("counter", "requests_finished_per_s", 1.0),
    "sglang:time_to_first_token_seconds": ("histogram", "ttft", 1.0),
    "sglang:inter_token_latency_seconds": ("histogram", "itl", 1.0),
    "sglang:time_per_output_token_seconds": ("histogram", "itl", 1.0),
    "sglang:e2e_request_latency_seconds": ("histogram", "e2e_latency", 1.0),
    # TGI (no TTFT histogram; counters exposed without _total)
    "tgi_batch_current_size": ("gauge", "num_requests_running", 1.0),
    "tgi_queue_size": ("gauge", "num_requests_waiting", 1.0),
    "tgi_request_success": ("counter", "requests_finished_per_s", 1.0),
    "tgi_request_mean_time_per_token_duration": ("histogram", "itl", 1.0),
    "tgi_request_duration": ("histogram", "e2e_latency", 1.0),
    "tgi_request_queue_duration": ("histogram", "queue_time", 1.0),
}
MODEL_LABELS = ("model_name", "model")
QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class Snapshot:
    engine: str = "unknown"
    values: dict[tuple[str, str], float] = field(default_factory=dict)  # gauges and counters
    buckets: dict[tuple[str, str], dict[float, float]] = field(default_factory=dict)  # le -> cumulative
    sums: dict[tuple[str, str], float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)


def engine_of(names: list[str]) -> str:
    if "gpuprobe_layout_info" in names:
        return "gpuprobe"  # the reference server: vLLM's names plus its own
    for prefix, engine in (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi")):
        if any(n.startswith(prefix) for n in names):
            return engine
    return "unknown"


def parse(text: str) -> Snapshot:
    """Parse exposition text; raises ValueError when it is not Prometheus text at all."""
    families = list(text_string_to_metric_families(text))
    snap = Snapshot(engine=engine_of([f.name for f in families]))
    for fam in families:
        spec = NAMES.get(fam.name)
        if spec is None:
            continue
        kind, name, scale = spec
        snap.kinds[name] = kind
        for s in fam.samples:
            model = next((s.labels[k] for k in MODEL_LABELS if k in s.labels), "")
            key = (name, model)
            if kind == "histogram":
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    b = snap.buckets.setdefault(key, {})
                    b[le] = b.get(le, 0.0) + s.value  # summed over the other labels
                elif s.name.endswith("_sum"):
                    snap.sums[key] = snap.sums.get(key, 0.0) + s.value
            elif s.name in (fam.name, fam.name + "_total"):
                snap.values[key] = snap.values.get(key, 0.0) + s.value * scale
    if not any(f.samples for f in families):
        raise ValueError("no Prometheus metrics in the response")
    return snap


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative counts {le: count}; None when empty."""
    les = sorted(buckets)
    if not les or buckets[les[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[les[-1]], 0.0, 0.0
    for le in les:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            width = count - below
            return lower + (le - lower) * ((rank - below) / width if width > 0 else 1.0)
        lower, below = (le if not math.isinf(le) else lower), count
    return lower


def window(prev: Snapshot, cur: Snapshot, dt_s: float) -> dict[tuple[str, str], float]:
    """Rates of counters and p50/p90/p99/mean of histograms over the window between scrapes.

    Keys are (metric, model); histogram metrics are named <base>_p50_s etc. A counter that went
    down (the engine restarted) gives no rate for this window; neither does an empty window.
    """
    out: dict[tuple[str, str], float] = {}
    for key, value in cur.values.items():
        kind = cur.kinds.get(key[0])
        if kind == "gauge":
            out[key] = value
        elif kind == "counter" and dt_s > 0:
            # A labelled counter first seen now started from 0 if its family was already there.
            before = prev.values.get(key, 0.0 if key[0] in prev.kinds else None)
            if before is not None and value >= before:
                out[key] = (value - before) / dt_s
    for key, cum in cur.buckets.items():
        old = prev.buckets.get(key, {})
        delta = {le: c - old.get(le, 0.0) for le, c in cum.items()}
        if any(v < 0 for v in delta.values()):
            continue  # reset
        total = delta.get(math.inf, max(delta.values(), default=0.0))
        if total <= 0:
            continue
        name, model = key
        for q in QUANTILES:
            out[(f"{name}_p{int(q * 100)}_s", model)] = quantile(q, delta)
        out[(f"{name}_mean_s", model)] = (cur.sums.get(key, 0.0) - prev.sums.get(key, 0.0)) / total
    return out
