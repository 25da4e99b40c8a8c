"""Step-time noise in the simulator: each step's time, its loop overhead aside, times a
seeded draw from the profile's quantiles (StepCost.prefill_noise, decode_noise and
decode_event_noise; profile_fit / noise_fit measure them). Draws come from the generator in
chunks, one pool per table, so a run is the same for the same seed."""
from __future__ import annotations

import numpy as np

from gpuprobe.perf.costmodel import StepCost


def noisy_step_fn(cost: StepCost, rng: np.random.Generator, chunk: int = 4096):
    """cost.step_fn() with each step's time, its loop overhead aside, multiplied by a draw
    from the cost's noise quantiles (prefill_noise for a step with prefill tokens,
    decode_noise otherwise, decode_event_noise for a decode step called with event=True
    where the cost has it; a kind without quantiles is not drawn for)."""
    base = cost.step_fn()
    ovh = cost.step_overhead_s * cost.scale
    tables = (cost.decode_noise, cost.prefill_noise, cost.decode_event_noise or cost.decode_noise)
    draws: tuple[list, list, list] = ([], [], [])

    def step_s(T: int, Q: float, B: int, C: int, k: int | None = None,
               event: bool = False) -> float:
        dt = base(T, Q, B, C, k)
        kind = 1 if T else 2 if event else 0
        table = tables[kind]
        if not table:
            return dt
        pool = draws[kind]
        if not pool:
            pool.extend(rng.integers(0, len(table), chunk).tolist())
        return ovh + (dt - ovh) * table[pool.pop()]
    return step_s
