"""An upper bound on a candidate's goodput per device, from its step curves alone (no
simulation): what lets the search skip the TP sizes and xPyD splits that cannot win.

Every request costs its prefill (the per-token and attention terms; the fixed part of a step
shared by at most max_num_batched_tokens prompt tokens) and its decode steps. A decode step of
B sequences takes d0 + d1 B + d2 B ctx at best (ctx: the mean context a decoded token reads),
so B is held below what the TPOT (and ITL) target allows, max_num_seqs, and the KV cache. A
unit serves at most

    monolithic  1 / (prefill work + decode tokens x step(B) / B)        one worker does both
    intra       min(1 / prefill work, B / step(B) / decode tokens)      each side at its share
    cross xPyD  min(x / prefill work, y B / step(B) / decode tokens)

requests/s, divided by the unit's devices; and nothing where too few requests' prefill alone
fits the TTFT target, or one decode step alone misses TPOT. Queueing, mixed steps and handoffs
only lower the real figure, so a candidate whose bound is below a goodput already found
cannot win. (Steps are priced without noise: a measured profile's spread moves both alike.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprobe.perf.costmodel import Profile, StepCost
from gpuprobe.perf.metrics import Slo


@dataclass(frozen=True)
class Lengths:
    """What the bound needs of a workload: prompt lengths, and the decode tokens and the mean
    context a decoded token reads."""

    prompt: np.ndarray          # tokens, per request
    decode_tokens: float        # mean output tokens after the first, per request
    context: float              # mean context (prompt + tokens so far) per decoded token

    @classmethod
    def of(cls, workload: pd.DataFrame) -> "Lengths":
        p = workload["prompt_tokens"].to_numpy(float)
        o = np.maximum(workload["output_tokens"].to_numpy(float), 1.0)
        steps = o - 1.0
        total = float(steps.sum())
        ctx = float((steps * p + steps * (steps + 1) / 2).sum() / total) if total else float(p.mean())
        return cls(p, float(steps.mean()), ctx)


def goodput_bound(cand, profile: Profile, lengths: Lengths, slo: Slo, max_num_seqs: int,
                  max_batched_tokens: int) -> float:
    """Requests/s per device that `cand` (a Candidate) cannot exceed within `slo`, with
    `profile` at its TP sizes (tp_family.profile_at). 0.0: the SLO cannot be met at all."""
    if cand.layout == "monolithic":
        w = profile.worker("monolithic", "mixed")
        pre = _prefill_work(w, lengths, slo, max_batched_tokens)
        per_token = _decode_seconds_per_token(w, lengths, slo, max_num_seqs)
        if pre is None or per_token is None:
            return 0.0
        return 1.0 / (pre + lengths.decode_tokens * per_token) / cand.devices
    x, y = (cand.num_prefill, cand.num_decode) if cand.layout == "cross" else (1, 1)
    pre = _prefill_work(profile.worker(cand.layout, "prefill"), lengths, slo, max_batched_tokens)
    per_token = _decode_seconds_per_token(profile.worker(cand.layout, "decode"), lengths, slo,
                                          max_num_seqs)
    if pre is None or per_token is None:
        return 0.0
    decode_rate = y / (lengths.decode_tokens * per_token) if lengths.decode_tokens else np.inf
    return min(x / pre, decode_rate) / cand.devices


def _prefill_work(w: StepCost, lengths: Lengths, slo: Slo, max_batched: int) -> float | None:
    """Mean seconds of prefill a request takes of its worker (the step's fixed part shared by
    a full step budget of prompts); None when fewer than slo.attain of the prompts could meet
    the TTFT target even alone on an idle worker."""
    a, b, c, *rest = w.prefill.coef
    e = rest[0] if rest else 0.0
    p = lengths.prompt
    alone = (a + w.step_overhead_s + b * p + c * p * p + e) * w.scale
    if np.mean(alone <= slo.ttft_s) < slo.attain:
        return None
    shared = (a + w.step_overhead_s) * p / max(max_batched, 1)
    return float(np.mean(shared + b * p + c * p * p + e) * w.scale)


def _decode_seconds_per_token(w: StepCost, lengths: Lengths, slo: Slo,
                              max_num_seqs: int) -> float | None:
    """Seconds per decoded token at the largest batch the targets, max_num_seqs and the KV
    cache allow (step / B); None when a step of one sequence already misses the target."""
    d0, d1, d2 = w.decode_coefs()
    per_seq = d1 + d2 * lengths.context
    limit = min(slo.tpot_s, slo.itl_s or np.inf)
    if d0 + per_seq > limit:
        return None if lengths.decode_tokens else 0.0
    batch = min(float(max_num_seqs), (limit - d0) / per_seq)
    if w.max_kv_tokens:
        batch = min(batch, w.max_kv_tokens / max(lengths.context, 1.0))
    batch = max(batch, 1.0)
    return (d0 + per_seq * batch) / batch
