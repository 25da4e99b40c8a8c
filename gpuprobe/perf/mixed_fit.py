"""The mixed-step factor from the mixed sweep's runs (gpuprobe.workloads.mixed_sweep).

The decode gap that ends where the sweep's prompt's first token comes out is the step that
carried both the prompt and the running decodes. The cost model prices such a step as
mixed_factor x (prefill(P) + decode(B, C) - min(a, d0)) (costmodel.StepCost), so the factor is
that gap over the bracket, from the same fits the profile holds: a simulator using it
reproduces the measured mixed steps.
"""
from __future__ import annotations

import numpy as np

FACTOR_RANGE = (0.5, 3.0)  # outside it the measurement is noise, not a slowdown


def mixed_gaps(runs: list[dict]) -> list[tuple[int, int, float, float]]:
    """(B, P, C, seconds) per run: the median over streams of the decode gap that ends nearest
    the prompt's first token, C the KV positions the decodes read then."""
    out = []
    for r in runs:
        pre = r["prefill"]
        if pre.get("status") != "ok" or pre.get("ttft_s") is None:
            continue
        first = pre["sent_s"] + pre["ttft_s"]
        gaps, ctx = [], []
        for d in r["decode"]:
            times = np.asarray(d.get("token_times") or [], float) + d["sent_s"]
            if d.get("status") != "ok" or len(times) < 3:
                continue
            k = int(np.argmin(np.abs(times[1:] - first))) + 1
            if abs(times[k] - first) < 0.5 * (times[k] - times[k - 1]) + 0.01:
                gaps.append(times[k] - times[k - 1])
                ctx.append(r["L"] + k)
        if len(gaps) >= max(1, r["B"] // 2):
            out.append((r["B"], r["P"], r["B"] * float(np.median(ctx)), float(np.median(gaps))))
    return out


def mixed_factor(cost, gaps) -> tuple[float, int] | None:
    """(factor, runs used) for StepCost `cost` from mixed_gaps(); None when no run gave a gap."""
    if not gaps:
        return None
    a = cost.prefill.coef[0]
    d0 = cost.decode.coef[0]
    factors = []
    for B, P, C, gap in gaps:
        prefill = float(np.dot(cost.prefill.coef[:3], (1.0, P, P * P)))
        decode = float(np.dot(cost.decode.coef, (1.0, B, C)))
        bracket = prefill + decode - min(a, d0)
        if bracket > 0:
            factors.append(gap / bracket)
    if not factors:
        return None
    lo, hi = FACTOR_RANGE
    return float(np.clip(np.median(factors), lo, hi)), len(factors)
