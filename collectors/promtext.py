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

# family name as the parser gives it (counters without _total) -> (kind, our name, scale, unit)
# Scale turns the engine's unit into ours: a 0..1 fraction into a percentage. A histogram's
# windowed figures are named <name>_p50_<unit> etc. (no unit: <name>_p50). A name with
# "{label}" takes that label's value (vllm:request_success by finished_reason).
NAMES: dict[str, tuple[str, str, float, str]] = {
    # vLLM: the V1 names 0.32 exports, and older ones earlier versions used
    "vllm:num_requests_running": ("gauge", "num_requests_running", 1.0, ""),
    "vllm:num_requests_waiting": ("gauge", "num_requests_waiting", 1.0, ""),
    "vllm:num_requests_waiting_by_reason": ("gauge", "num_requests_waiting_{reason}", 1.0, ""),
    "vllm:kv_cache_usage_perc": ("gauge", "kv_cache_usage_pct", 100.0, ""),
    "vllm:gpu_cache_usage_perc": ("gauge", "kv_cache_usage_pct", 100.0, ""),  # V0, before 0.10
    "vllm:prompt_tokens": ("counter", "prompt_tokens_per_s", 1.0, ""),
    "vllm:generation_tokens": ("counter", "generation_tokens_per_s", 1.0, ""),
    "vllm:request_success": ("counter", "requests_{finished_reason}_per_s", 1.0, ""),
    "vllm:num_preemptions": ("counter", "preemptions_per_s", 1.0, ""),
    # prefix reuse: prompt tokens looked up and found in the local prefix cache (V1; V0's
    # gpu_prefix_cache_hit_rate was a rate, not counts), and all cached tokens, external too
    "vllm:prefix_cache_queries": ("counter", "prefix_cache_queries_per_s", 1.0, ""),
    "vllm:prefix_cache_hits": ("counter", "prefix_cache_hits_per_s", 1.0, ""),
    "vllm:prompt_tokens_cached": ("counter", "prompt_tokens_cached_per_s", 1.0, ""),
    "vllm:admission_rejections": ("counter", "admission_rejections_per_s", 1.0, ""),
    "vllm:iteration_tokens_total": ("histogram", "iteration_tokens", 1.0, ""),
    "vllm:request_prefill_kv_computed_tokens": ("histogram", "prefill_kv_computed_tokens", 1.0, ""),
    "vllm:time_to_first_token_seconds": ("histogram", "ttft", 1.0, "s"),
    "vllm:inter_token_latency_seconds": ("histogram", "itl", 1.0, "s"),
    "vllm:time_per_output_token_seconds": ("histogram", "itl", 1.0, "s"),  # before 0.11
    "vllm:e2e_request_latency_seconds": ("histogram", "e2e_latency", 1.0, "s"),
    "vllm:request_queue_time_seconds": ("histogram", "queue_time", 1.0, "s"),
    "vllm:request_prefill_time_seconds": ("histogram", "prefill_time", 1.0, "s"),
    "vllm:request_decode_time_seconds": ("histogram", "decode_time", 1.0, "s"),
    # gpuprobe serve (besides vLLM's names; its finished requests are read from
    # vllm:request_success, since gpuprobe_requests_finished also counts refusals)
    "gpuprobe_kv_handoff_seconds": ("histogram", "kv_handoff", 1.0, "s"),
    # SGLang
    "sglang:num_running_reqs": ("gauge", "num_requests_running", 1.0, ""),
    "sglang:num_queue_reqs": ("gauge", "num_requests_waiting", 1.0, ""),
    "sglang:token_usage": ("gauge", "kv_cache_usage_pct", 100.0, ""),
    "sglang:prompt_tokens": ("counter", "prompt_tokens_per_s", 1.0, ""),
    "sglang:generation_tokens": ("counter", "generation_tokens_per_s", 1.0, ""),
    "sglang:num_requests": ("counter", "requests_finished_per_s", 1.0, ""),
    "sglang:time_to_first_token_seconds": ("histogram", "ttft", 1.0, "s"),
    "sglang:inter_token_latency_seconds": ("histogram", "itl", 1.0, "s"),
    "sglang:time_per_output_token_seconds": ("histogram", "itl", 1.0, "s"),
    "sglang:e2e_request_latency_seconds": ("histogram", "e2e_latency", 1.0, "s"),
    # TGI (no TTFT histogram; counters exposed without _total)
    "tgi_batch_current_size": ("gauge", "num_requests_running", 1.0, ""),
    "tgi_queue_size": ("gauge", "num_requests_waiting", 1.0, ""),
    "tgi_request_success": ("counter", "requests_finished_per_s", 1.0, ""),
    "tgi_request_mean_time_per_token_duration": ("histogram", "itl", 1.0, "s"),
    "tgi_request_duration": ("histogram", "e2e_latency", 1.0, "s"),
    "tgi_request_queue_duration": ("histogram", "queue_time", 1.0, "s"),
}
# vLLM's finished_reason values that mean the request completed (its rate is
# requests_finished_per_s); abort and error are counted apart, never in it.
COMPLETED_REASONS = ("stop", "length", "repetition")
MODEL_LABELS = ("model_name", "model")
QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class Snapshot:
    engine: str = "unknown"
    values: dict[tuple[str, str], float] = field(default_factory=dict)  # gauges and counters
    buckets: dict[tuple[str, str], dict[float, float]] = field(default_factory=dict)  # le -> cumulative
    sums: dict[tuple[str, str], float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # histogram name -> unit suffix


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
        kind, pattern, scale, unit = spec
        for s in fam.samples:
            model = next((s.labels[k] for k in MODEL_LABELS if k in s.labels), "")
            name = pattern.format(**s.labels) if "{" in pattern else pattern
            if "{" in name:
                continue  # the label the name needs is missing
            snap.kinds[name] = kind
            if kind == "histogram":
                snap.units[name] = unit
                _histogram_sample(snap, (name, model), s)
            elif s.name in (fam.name, fam.name + "_total"):
                snap.values[(name, model)] = snap.values.get((name, model), 0.0) + s.value * scale
                if s.labels.get("finished_reason") in COMPLETED_REASONS:
                    total = ("requests_finished_per_s", model)
                    snap.kinds[total[0]] = kind
                    snap.values[total] = snap.values.get(total, 0.0) + s.value
    if not any(f.samples for f in families):
        raise ValueError("no Prometheus metrics in the response")
    return snap


def _histogram_sample(snap: Snapshot, key: tuple[str, str], s) -> None:
    if s.name.endswith("_bucket"):
        le = float(s.labels["le"])
        b = snap.buckets.setdefault(key, {})
        b[le] = b.get(le, 0.0) + s.value  # summed over the other labels
    elif s.name.endswith("_sum"):
        snap.sums[key] = snap.sums.get(key, 0.0) + s.value


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative counts {le: count}; None when empty."""
    found = quantile_or_bound(q, buckets)
    return None if found is None else found[0]


def quantile_or_bound(q: float, buckets: dict[float, float]) -> tuple[float, bool] | None:
    """(value, is_bound): histogram_quantile's linear interpolation inside the bucket that
    holds the rank, or, where that bucket is wider than the interpolated value itself (vLLM's
    first queue-time bucket is 0-0.3 s: a 0.03 ms wait read 150 ms), only its upper edge,
    which the quantile is known to be below. None when empty."""
    les = sorted(buckets)
    if not les or buckets[les[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[les[-1]], 0.0, 0.0
    for le in les:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower, False
            width = count - below
            value = lower + (le - lower) * ((rank - below) / width if width > 0 else 1.0)
            if le - lower > value and value < le:
                return le, True
            return value, False
        lower, below = (le if not math.isinf(le) else lower), count
    return lower, False


def window(prev: Snapshot, cur: Snapshot, dt_s: float) -> dict[tuple[str, str], float]:
    """Rates of counters and p50/p90/p99/mean of histograms over the window between scrapes.

    Keys are (metric, model); histogram metrics are named <base>_p50_s etc. (the unit from
    NAMES). A quantile known only as a bound (quantile_or_bound) is <base>_p50_below_s, the
    bucket edge it lies under, and <base>_p50_s is left out. A counter that went down (the
    engine restarted) gives no rate for this window; neither does an empty window.
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
        unit = cur.units.get(name, "s")
        suffix = f"_{unit}" if unit else ""
        for q in QUANTILES:
            value, bound = quantile_or_bound(q, delta)
            out[(f"{name}_p{int(q * 100)}{'_below' if bound else ''}{suffix}", model)] = value
        out[(f"{name}_mean{suffix}", model)] = (cur.sums.get(key, 0.0) - prev.sums.get(key, 0.0)) / total
    return out
