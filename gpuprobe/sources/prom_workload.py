"""A workload frame from what Prometheus has: per-bucket rates and, where the engine exports
them, its request-length histograms. For a recommendation per fleet group (`fleet
--profile`) and `recommend --source`, which weigh layouts on a workload.

Arrivals are Poisson at each bucket's requests/s. Lengths are drawn from the engine's
histograms (vLLM's `vllm:request_prompt_tokens` and `vllm:request_generation_tokens`,
uniform within a bucket) and scaled so each bucket's mean matches its token rates over its
request rate; without histograms every request gets its bucket's mean lengths, and the frame
says so (`attrs["gpuprobe_lengths"]`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.sources.promapi import PromApi, duration

HISTOGRAMS = {"prompt": "vllm:request_prompt_tokens_bucket",
              "output": "vllm:request_generation_tokens_bucket"}


def length_histogram(api: PromApi, name: str, start_s: float, end_s: float,
                     matcher: str = "") -> tuple[np.ndarray, np.ndarray] | None:
    """(upper edges, counts per bucket) of a length histogram's increase over the range, or
    None when the engine exports none (or saw no request)."""
    rng = duration(max(end_s - start_s, 1.0))
    sel = f"{name}{{{matcher}}}" if matcher else name
    rows = api.query(f"sum by (le) (increase({sel}[{rng}]))", end_s)
    if not rows:
        return None
    edges = np.array([float(lab["le"]) for lab, _ in rows])
    cum = np.array([v for _, v in rows])
    order = np.argsort(edges)
    edges, cum = edges[order], np.maximum.accumulate(cum[order])
    counts = np.diff(np.concatenate([[0.0], cum]))
    if counts.sum() <= 0:
        return None
    if np.isinf(edges[-1]):  # the +Inf bucket: twice the last finite edge
        edges[-1] = 2 * edges[-2] if len(edges) > 1 else 1.0
    return edges, counts


def _draw(hist: tuple[np.ndarray, np.ndarray] | None, n: int, rng: np.random.Generator) -> np.ndarray:
    if hist is None:
        return np.ones(n)
    edges, counts = hist
    k = rng.choice(len(edges), n, p=counts / counts.sum())
    lo = np.concatenate([[0.0], edges[:-1]])[k]
    return np.maximum(rng.uniform(lo, edges[k]), 1.0)


def workload_from_rates(buckets: pd.DataFrame, bucket_s: float, prompt_hist=None, output_hist=None,
                        seed: int = 0, min_requests: int = 300) -> pd.DataFrame:
    """buckets: start_s, requests_per_s, prefill_tokens_per_s, decode_tokens_per_s (one
    group's). Returns arrival_s, prompt_tokens, output_tokens; a range too short for
    min_requests requests is repeated (same rates) until it holds that many."""
    b = buckets.dropna(subset=["requests_per_s", "prefill_tokens_per_s", "decode_tokens_per_s"])
    b = b[b["requests_per_s"] > 0]
    if b.empty:
        raise UserError("no requests in the range: the engines' counters did not move")
    rng = np.random.default_rng(seed)
    expected = float((b["requests_per_s"] * bucket_s).sum())
    reps = max(1, int(np.ceil(min_requests / max(expected, 1e-9))))
    parts, t0 = [], 0.0
    for _ in range(reps):
        for r in b.itertuples():
            n = rng.poisson(r.requests_per_s * bucket_s)
            if n:
                p, o = _draw(prompt_hist, n, rng), _draw(output_hist, n, rng)
                p *= (r.prefill_tokens_per_s / r.requests_per_s) / p.mean()
                o *= (r.decode_tokens_per_s / r.requests_per_s) / o.mean()
                parts.append(pd.DataFrame({"arrival_s": t0 + r.start_s - b["start_s"].iloc[0]
                                           + np.sort(rng.uniform(0, bucket_s, n)),
                                           "prompt_tokens": np.maximum(np.round(p), 1).astype(np.int64),
                                           "output_tokens": np.maximum(np.round(o), 1).astype(np.int64)}))
        t0 += float(b["start_s"].iloc[-1] - b["start_s"].iloc[0]) + bucket_s
    if not parts:
        raise UserError("no requests in the range: the engines' counters did not move")
    out = pd.concat(parts, ignore_index=True).sort_values("arrival_s", kind="stable").reset_index(drop=True)
    out.attrs["gpuprobe_lengths"] = ("engine histograms" if prompt_hist is not None and output_hist is not None
                                     else "bucket means (the engine exports no length histograms)")
    out.attrs["gpuprobe_scaled"] = {"from_rates": True, "bucket_s": bucket_s, "repeats": reps}
    return out
