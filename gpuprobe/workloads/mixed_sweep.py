"""The mixed sweep's load: how much a decode step slows when a prefill shares it, measured from
the client on any engine (vLLM schedules a new prompt into the running decodes' next step).

A burst of B decode streams runs; once they are decoding, one prompt of P tokens is sent
(max_tokens 1). The decode gap that ends where that prompt's first token comes out is the
step that carried both; gpuprobe.perf.mixed_fit turns the runs into the cost model's
mixed-step factor.
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
