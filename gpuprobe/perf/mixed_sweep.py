"""The mixed sweep: how much a decode step slows when a prefill shares it, measured from the
client on any engine (vLLM schedules a new prompt into the running decodes' next step).

A burst of B decode streams runs; once they are decoding, one prompt of P tokens is sent
(max_tokens 1). The decode gap that ends where that prompt's first token comes out is the
step that carried both. The cost model prices such a step as
mixed_factor x (prefill(P) + decode(B, C) - min(a, d0)) (costmodel.StepCost), so the factor is
that gap over the bracket, from the same fits the profile holds: a simulator using it
reproduces the measured mixed steps.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

MIXED_BATCH = 4          # decode streams running when the prompt arrives
MIXED_PROMPTS = (128, 256)
MIXED_REPS = 2
MIXED_DECODE_TOKENS = 24  # long enough that the prompt lands mid-stream (after wait_for's 6)
MIXED_PROMPT_CONTEXT = 32  # the decode streams' own prompts
FACTOR_RANGE = (0.5, 3.0)  # outside it the measurement is noise, not a slowdown


async def mixed_runs(session, url: str, body, prompts, batch: int, wait_s: float,
                     reps: int = MIXED_REPS, decode_tokens: int = MIXED_DECODE_TOKENS) -> list[dict]:
    """Send the sweep; per run {'B', 'P', 'L', 'decode': [rec], 'prefill': rec} with
    replay-client records (token_times in s from each one's send, sent_s that send's offset
    from the burst's). wait_s: how long after the burst the prompt goes, so the streams are
    decoding by then (their first token and a few steps, from the decode sweep)."""
    from gpuprobe.workloads.replay_client import send_one

    runs = []
    for P in prompts:
        for _ in range(reps):
            tasks = [asyncio.ensure_future(send_one(session, url,
                                                    body(MIXED_PROMPT_CONTEXT, decode_tokens), {}))
                     for _ in range(batch)]
            t0 = time.monotonic()
            await asyncio.sleep(wait_s)
            sent = time.monotonic() - t0
            pre = await send_one(session, url, body(P, 1), {"prompt_tokens": P})
            decode = [rec | {"sent_s": 0.0} for rec in await asyncio.gather(*tasks)]
            runs.append({"B": batch, "P": P, "L": MIXED_PROMPT_CONTEXT, "decode": decode,
                         "prefill": pre | {"sent_s": sent}})
    return runs


def wait_for(cal_decode, batch: int, steps: int = 6) -> float:
    """Seconds from a burst of `batch` streams to `steps` tokens into their decode, from the
    decode sweep's records ((B, L, [rec]) as calibrate keeps them); 1 s when it has none."""
    for B, _, recs in cal_decode:
        if B == batch and recs:
            ttft = float(np.median([r["ttft_s"] for r in recs if r.get("ttft_s") is not None]))
            gaps = np.concatenate([np.diff(r["token_times"]) for r in recs
                                   if len(r.get("token_times") or []) > 2] or [np.zeros(1)])
            return ttft + steps * float(np.median(gaps))
    return 1.0


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
