"""The one place gpuprobe.decide runs the simulator: a candidate at a rate scale -> summary.

Everything that ranks layouts (the goodput search, recommend, simulate's pick, the demo)
predicts through predict(), so switching to another prediction path changes one function.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.perf.costmodel import Profile, interpolated
from gpuprobe.perf.metrics import Slo
from gpuprobe.sim.layouts import LayoutConfig
from gpuprobe.sim.simulator import simulate
from gpuprobe.perf.tp_family import profile_at

MAX_NUM_SEQS = 256       # simulate's defaults: an 8B model's batch on a large GPU
NUM_BLOCKS = 40_000      # KV blocks of 16 tokens per worker


def predict(workload: pd.DataFrame, profile: Profile, cand, slo: Slo, rate_scale: float = 1.0,
            seed: int | None = 0, limits: dict | None = None) -> dict:
    """The simulator's summary (gpuprobe.perf.metrics.summarize keys) of `cand` (a
    Candidate) serving `workload` with its arrival times divided by rate_scale (the same mix
    and burst shape, rate_scale times the requests per second). workload: arrival_s from 0,
    sorted, prompt_tokens, output_tokens. limits: max_num_seqs / num_blocks per worker
    (default MAX_NUM_SEQS, and the KV the profile's workers hold, else NUM_BLOCKS)."""
    wl = workload if rate_scale == 1.0 else workload.assign(
        arrival_s=workload["arrival_s"].to_numpy() / rate_scale)
    layout = cand.layout
    prof = profile_for(profile, cand)
    config = layout_config(cand, int(workload["prompt_tokens"].max()), limits, prof)
    return simulate(wl, prof, layout, slo, config, seed).summary


def layout_config(cand, max_prompt: int, limits: dict | None = None,
                  profile: Profile | None = None) -> LayoutConfig:
    """Scheduler settings of a candidate's workers: simulate's defaults, a step budget that
    takes the longest prompt whole, and the chunked-prefill budget where the candidate has one.
    KV blocks: limits' num_blocks, else what the profile's worker holds, else NUM_BLOCKS."""
    kw = {"max_num_seqs": MAX_NUM_SEQS, "num_blocks": NUM_BLOCKS, **(limits or {})}
    kw["max_num_batched_tokens"] = max(2048, max_prompt)

    def role(name: str, **extra) -> SchedulerConfig:
        blocks = (None if profile is None or "num_blocks" in (limits or {})
                  else profile.num_kv_blocks(cand.layout, name))
        return SchedulerConfig(role=name, **{**kw, **extra, "num_blocks": blocks or kw["num_blocks"]})
    return LayoutConfig(role("mixed", chunked_prefill_tokens=cand.chunked_prefill_tokens),
                        role("prefill"), role("decode"),
                        num_prefill=cand.num_prefill, num_decode=cand.num_decode)


def profile_for(profile: Profile, cand) -> Profile:
    """The profile with the candidate's workers: at its TP sizes (tp_family.profile_at), and
    intra's at its prefill share. Measured intra workers (at profile.prefill_share) are
    rescaled by share ** -share_alpha; without them Profile.worker derives both from the
    whole device at the new share."""
    profile = profile_at(profile, cand.tp, cand.prefill_tp, cand.decode_tp)
    share = cand.prefill_share
    if cand.layout != "intra" or share is None or abs(share - profile.prefill_share) < 1e-9:
        return profile
    workers = dict(profile.workers)
    s0, a = profile.prefill_share, profile.share_alpha
    for role, ratio in (("prefill", share / s0), ("decode", (1 - share) / (1 - s0))):
        w = workers.get(f"intra.{role}")
        if w is not None:
            workers[f"intra.{role}"] = replace(
                interpolated(w), scale=w.scale * ratio ** -a,
                reasons=w.reasons + (f"intra.{role} rescaled from share {s0:.2f} (alpha {a})",))
    return replace(profile, workers=workers, prefill_share=share)
