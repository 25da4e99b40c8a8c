"""Discrete-event simulation of a workload through a layout, driving the shared Scheduler.

    result = simulate(workload_df, profile, "intra", slo=Slo(2.0, 0.1))
    result.summary["ttft_p99_s"], result.requests["ttft_s"]

workload_df columns: arrival_s (seconds from the first request), prompt_tokens,
output_tokens, and optionally cached_tokens (each prompt's tokens a prefix cache serves: the
prefill starts after them; decide/prefix_reuse.py). The result is deterministic for a seed: the same inputs give the same numbers
(ties keep the workload's order). The only randomness is step-time noise, which a measured
profile carries (how much repeated steps of one shape varied) and a seeded generator draws.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.metrics import Slo, per_request, summarize, tbt_summary
from gpuprobe.sim.layouts import LAYOUTS, LayoutConfig, num_devices, run_layout
from gpuprobe.sim.timeline import token_stats

REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class SimResult:
    """requests: one row per request (arrival_s, output_tokens, ttft_s, e2e_s, tbt_mean_s,
    tbt_max_s, ok); summary: aggregate metrics (see metrics.py) plus 'confidence' and stats."""

    layout: str
    requests: pd.DataFrame
    summary: dict


def simulate(workload: pd.DataFrame, profile: Profile, layout: str, slo: Slo = Slo(),
             config: LayoutConfig | None = None, seed: int | None = 0) -> SimResult:
    """Simulate `workload` (in arrival order, as loaded) through `layout` with `profile`'s
    costs. Times in seconds.
    seed: of the step-time noise a measured profile carries (the same seed, the same result;
    None: every step on its curve)."""
    missing = [c for c in REQUIRED if c not in workload.columns]
    if missing:
        raise UserError(f"workload lacks column(s) {missing}; needs {list(REQUIRED)}")
    if layout not in LAYOUTS:
        raise UserError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    wl = workload
    arrival = wl["arrival_s"].to_numpy(dtype=float)
    if len(arrival) > 1 and (np.diff(arrival) < 0).any():  # sorted once where it was loaded
        raise ValueError("workload is not in arrival order (gpuprobe.workloads.loading.as_workload "
                         "sorts it)")
    prompt = wl["prompt_tokens"].to_numpy()
    output = np.maximum(wl["output_tokens"].to_numpy(), 1)
    cached = wl["cached_tokens"].to_numpy() if "cached_tokens" in wl.columns else None
    with _gc_paused():
        raw = run_layout(layout, arrival, prompt, output, profile, config or LayoutConfig(), seed,
                         cached)
    tok = token_stats(raw.first_s, raw.times_s, raw.run_owner, raw.run_start, raw.run_count)
    req = per_request(arrival, raw.first_s, tok.last_s, output)
    req["tbt_max_s"] = np.where(output > 1, tok.tbt_max_s, np.nan)
    req.loc[~req["ok"], ["ttft_s", "e2e_s", "tbt_mean_s", "tbt_max_s"]] = np.nan
    # A request's gaps add up to its last minus first token: a total independent of the order
    # the gaps are pooled in, so the macro-step and single-step runs agree bit for bit.
    span = tok.last_s - raw.first_s
    total_s = float(np.sum(span[np.isfinite(span)]))
    tbt = tbt_summary(tok.gap_s, tok.gap_count, total_s)
    req.insert(0, "request_idx", wl.index.to_numpy())
    req["prompt_tokens"] = prompt
    if cached is not None:
        req["cached_tokens"] = cached
    summary = summarize(req, tbt, slo, num_devices(layout, config, profile))
    summary.update(raw.stats)
    summary["layout"] = layout
    summary["confidence"] = _confidence(profile, layout, raw.stats)
    return SimResult(layout, req, summary)


@contextmanager
def _gc_paused():
    # A run allocates millions of small objects that form no cycles (token lists, events,
    # step times); the cycle collector would rescan the growing heap for nothing (~5-10%).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _confidence(profile: Profile, layout: str, stats: dict) -> dict:
    conf = profile.confidence((layout,))
    roles = ("mixed",) if layout == "monolithic" else ("prefill", "decode")
    for role in roles:
        w = profile.worker(layout, role)
        key = "monolithic" if layout == "monolithic" else role
        t_max = stats.get(f"{key}_max_prefill_tokens", 0)
        if t_max > w.prefill.x_max * 1.5:
            conf["reasons"].append(f"{layout} {role}: prefill of {t_max} tokens extrapolates past "
                                   f"the fitted {w.prefill.x_max:.0f}")
        b_max = stats.get(f"{key}_max_decode_seqs", 0)
        if b_max > w.decode.x_max * 1.5:
            conf["reasons"].append(f"{layout} {role}: decode batch {b_max} extrapolates past "
                                   f"the fitted {w.decode.x_max:.0f}")
    if stats.get("num_rejected"):
        conf["reasons"].append(f"{stats['num_rejected']} requests do not fit the KV cache")
    conf["level"] = "low" if conf["reasons"] else "high"
    return conf
