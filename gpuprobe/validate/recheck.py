"""Has the server itself sped up or slowed down since it was calibrated? A short second
calibration after the replays answers with the workers' own steps.

The speed probe (speed_probe.py) reads a proxy on the same cores, and a proxy can miss: it
has missed a monolithic worker that ran ~25% slower in its replays than calibrated, and read
a prefill core 1.1-1.3x slow whose worker was not (docs/model-log.md, code19 and conv19). The recheck asks
the worker: a few prefill and decode shapes after the last replay, each step's time against
what the first calibration measured for the same shape (prefill tokens and prompts; decode
batch and context per sequence in 32-token bins), the median ratio per worker. Against the
same shapes, not the fit: the fit's own error at the recheck's shapes (1.7x for one decode
worker, whose recheck bursts were small) is not a change of speed. The replays sit between the
two calibrations, so each is given the ratio interpolated at its midpoint (1 at the first
calibration, the recheck's ratio at the recheck).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# Enough shapes for a median per worker in under a second of load here: one request at a
# time per prefill size,
# then concurrent decode bursts (the split layouts' decode worker only sees these).
RECHECK = {"prefill_sizes": (32, 128, 512), "decode_batches": (1, 8, 32), "decode_prompts": (32,),
           "decode_tokens": 12, "reps": 1, "wake_gaps": ()}
MIN_STEPS = 5
RATIO_RANGE = (0.5, 2.0)


def shape_keys(steps: pd.DataFrame) -> pd.Series:
    """A step's shape: ('p', tokens, prompts) for prefill-only, ('d', batch, context per
    sequence / 32) for decode-only, None for mixed steps."""
    T = steps["num_prefill_tokens"].fillna(0).astype(int)
    k = steps["num_prefill_seqs"].fillna(0).astype(int)
    B = steps["num_decode_seqs"].fillna(0).astype(int)
    C = steps["num_decode_ctx_tokens"].fillna(0)
    keys = [("p", t, n) if t and not b else ("d", b, int(round(c / b / 32))) if b and not t else None
            for t, n, b, c in zip(T, k, B, C)]
    return pd.Series(keys, index=steps.index, dtype=object)


def same_shape_ratio(now: pd.DataFrame, before: pd.DataFrame) -> float | None:
    """Median over shapes seen in both of (median step time now / median before); None when
    fewer than MIN_STEPS steps now have a shape that was calibrated."""
    kn, kb = shape_keys(now), shape_keys(before)
    med_before = before["duration_s"].groupby(kb.map(str)).median()
    ratios, n = [], 0
    for key, grp in now["duration_s"].groupby(kn.map(str)):
        if key != "None" and key in med_before.index and med_before[key] > 0:
            ratios.append(float(grp.median() / med_before[key]))
            n += len(grp)
    if n < MIN_STEPS or not ratios:
        return None
    return float(np.clip(np.median(ratios), *RATIO_RANGE))


def bracket_factors(calibrate: tuple[float, float], recheck: tuple[float, float],
                    ratios: dict[str, float | None], replays: list[tuple[float, float]]
                    ) -> list[dict[str, float]]:
    """Per replay, {worker: 1 + (ratio - 1) * where its midpoint falls between the two
    calibrations' midpoints} (0 at the first, 1 at the recheck); 1.0 without a ratio."""
    c, r = sum(calibrate) / 2, sum(recheck) / 2
    out = []
    for w in replays:
        x = min(1.0, max(0.0, ((sum(w) / 2) - c) / (r - c))) if r > c else 1.0
        out.append({k: 1.0 + ((v if v is not None else 1.0) - 1.0) * x for k, v in ratios.items()})
    return out
