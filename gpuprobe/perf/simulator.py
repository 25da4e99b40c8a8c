"""Discrete-event simulation of a workload through a layout, driving the shared Scheduler.

    result = simulate(workload_df, profile, "intra", slo=Slo(2.0, 0.1))
    result.summary["ttft_p99_s"], result.requests["ttft_s"]

workload_df columns: arrival_s (seconds from the first request), prompt_tokens,
output_tokens. The result is deterministic: the same inputs give the same numbers (the model
has no randomness; ties keep the workload's order).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.metrics import Slo, aggregate, per_request
from gpuprobe.perf.sim_layouts import DEVICES, LAYOUTS, LayoutConfig, RawTimes, run_layout

REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class SimResult:
    """requests: one row per request (arrival_s, output_tokens, ttft_s, e2e_s, tbt_mean_s,
    tbt_max_s, ok); summary: aggregate metrics (see metrics.py) plus 'confidence' and stats."""

    layout: str
    requests: pd.DataFrame
    summary: dict


def _token_times(raw: RawTimes, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner, time) of every token after the first, grouped by request; and last_s per request."""
    starts, counts, owners = [], [], []
    for i, r in enumerate(raw.runs):
        if r:
            starts += r[0::2]
            counts += r[1::2]
            owners += [i] * (len(r) // 2)
    counts_a = np.asarray(counts, dtype=np.int64)
    offsets = np.cumsum(counts_a) - counts_a
    idx = np.repeat(np.asarray(starts, dtype=np.int64) - offsets, counts_a) + np.arange(counts_a.sum())
    times = raw.ends[idx] + raw.token_out_s if len(idx) else np.zeros(0)
    owner = np.repeat(np.asarray(owners, dtype=np.int64), counts_a)
    last = raw.first_s.copy()
    if len(owner):
        last[owner] = times  # later writes win: each owner's last token
    return owner, times, last


def simulate(workload: pd.DataFrame, profile: Profile, layout: str, slo: Slo = Slo(),
             config: LayoutConfig | None = None) -> SimResult:
    """Simulate `workload` through `layout` with `profile`'s costs. Times in seconds."""
    missing = [c for c in REQUIRED if c not in workload.columns]
    if missing:
        raise UserError(f"workload lacks column(s) {missing}; needs {list(REQUIRED)}")
    if layout not in LAYOUTS:
        raise UserError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    wl = workload.sort_values("arrival_s", kind="stable")
    arrival = wl["arrival_s"].to_numpy(dtype=float)
    prompt = wl["prompt_tokens"].to_numpy()
    output = np.maximum(wl["output_tokens"].to_numpy(), 1)
    raw = run_layout(layout, arrival, prompt, output, profile, config or LayoutConfig())
    owner, times, last = _token_times(raw, len(arrival))
    req = per_request(arrival, raw.first_s, last, output)
    gaps = np.diff(times) if len(times) else np.zeros(0)
    if len(owner):
        new_owner = np.r_[True, owner[1:] != owner[:-1]]
        # The first gap of each request runs from its first token, not the previous request's.
        gaps = np.r_[times[0] - raw.first_s[owner[0]], gaps]
        gaps[new_owner] = times[new_owner] - raw.first_s[owner[new_owner]]
        tbt_max = np.zeros(len(arrival))
        starts = np.flatnonzero(new_owner)  # tokens are grouped by request, in time order
        tbt_max[owner[starts]] = np.maximum.reduceat(gaps, starts)
        req["tbt_max_s"] = np.where(output > 1, tbt_max, np.nan)
    else:
        req["tbt_max_s"] = np.nan
    req.loc[~req["ok"], ["ttft_s", "e2e_s", "tbt_mean_s", "tbt_max_s"]] = np.nan
    req.insert(0, "request_idx", wl.index.to_numpy())
    req["prompt_tokens"] = prompt
    summary = aggregate(req, gaps[np.isfinite(gaps)], slo, DEVICES[layout])
    summary.update(raw.stats)
    summary["layout"] = layout
    summary["confidence"] = _confidence(profile, layout, raw.stats)
    return SimResult(layout, req, summary)


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
