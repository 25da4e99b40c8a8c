"""The one prediction path: `simulate`, `validate` and `recommend` predict through predict().

    summary = predict(workload_df, profile, "intra", slo, config, seeds=9)
    summary["ttft_p50_s"], summary["host_effects"]   # [] on a quiet machine

A prediction is the simulator's summary (simulator.py), the median over `seeds` noise seeds
of the profile's step-time noise: every workload draws the same noise for a seed, so one
seed's luck would be every prediction's (docs/model-log.md, "Seeds").

Host effects are corrections for a noisy host that validate measures while it checks the
model on this machine, and that a quiet machine or a roofline profile does not have
(`HostEffects`; None: none applied):
- front_cpu: the CPU the serving front and the load client take from the workers' cores
  (contention.py): on the unpinned monolithic worker a stall at each arrival plus a stretch
  of its busy time, on a split layout's pinned workers a stretch shared by their idle time;
  both depend on how busy the workers are, so a few passes from no stretch.
- speed_drift: per replay, how much slower each worker's cores ran than during calibration
  (the speed probe); the prediction is then one per replay, at its speed, and the median
  over them, as the measurement is.
The summary's "host_effects" lists the ones applied.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from gpuprobe.perf.metrics import Slo
from gpuprobe.sim.layouts import LayoutConfig

CONTENTION_PASSES = 3  # simulate, stretch by the busy fractions, again: a fixed point


@dataclass(frozen=True)
class HostEffects:
    """Corrections for a noisy host, per layout (module docstring)."""

    front_cpu: dict = field(default_factory=dict)    # layout -> contention.FrontCpu
    speed_drift: dict = field(default_factory=dict)  # layout -> [per replay {worker: factor}]

    def applied(self, layout: str) -> list[str]:
        return [name for name, per in (("front_cpu", self.front_cpu),
                                       ("speed_drift", self.speed_drift)) if per.get(layout)]

    def to_dict(self) -> dict:
        return {"front_cpu": {k: vars(v) for k, v in self.front_cpu.items() if v is not None},
                "speed_drift": self.speed_drift}


def median_summary(summaries: list[dict]) -> dict:
    """Per numeric key, the median over the summaries (the first one's value for the rest);
    a count stays an int where its median is whole."""
    out = dict(summaries[0])
    for k, v in out.items():
        vals = [s.get(k) for s in summaries]
        if isinstance(v, (int, float)) and all(isinstance(x, (int, float)) for x in vals):
            m = float(np.median(vals))
            out[k] = int(m) if isinstance(v, int) and not isinstance(v, bool) \
                and m.is_integer() else m
    return out


def layout_profile(profile, layout: str):
    """`profile` with the front's extra split-layout path of `layout` (measured per layout by
    validate: meta['split_in_s'][layout]) as its overhead.split_in_s."""
    per = (profile.meta or {}).get("split_in_s") or {}
    if layout == "monolithic" or layout not in per:
        return profile
    return replace(profile, overhead=replace(profile.overhead, split_in_s=float(per[layout])))


def predict(workload: pd.DataFrame, profile, layout: str, slo: Slo = Slo(),
            config: LayoutConfig | None = None, seeds: int = 1, first_seed: int | None = 0,
            host_effects: HostEffects | None = None) -> dict:
    """The predicted summary of `workload` (arrival_s as offered) through `layout`.

    With speed drift for the layout, replay i is predicted with seeds first_seed + i + R*j
    (R replays, j < seeds); without, seeds first_seed .. first_seed + seeds - 1. Keys beyond
    the simulator's: host_effects (applied), seeds, front_stretch (worker -> factor)."""
    from gpuprobe.perf.contention import stretched

    prof = layout_profile(profile, layout)
    he = host_effects or HostEffects()
    front = he.front_cpu.get(layout)
    groups = he.speed_drift.get(layout) or [{}]
    per_group, stretch, confidence = [], {}, None
    for i, f in enumerate(groups):
        # first_seed None: every step on its curve (one run, as simulate(seed=None))
        run_seeds = [None] if first_seed is None else \
            [first_seed + i + len(groups) * j for j in range(seeds)]
        sims = [_contended(workload, stretched(prof, f) if f else prof, layout,
                           _scaled_front(front, f), slo, config, seed) for seed in run_seeds]
        per_group.append(median_summary([res.summary for _, res in sims]))
        if i == 0:
            stretch, confidence = sims[0][0], sims[0][1].summary["confidence"]
    out = median_summary(per_group)
    out.update(confidence=confidence, host_effects=he.applied(layout), seeds=seeds,
               front_stretch=stretch)
    return out


def _scaled_front(front, factors: dict[str, float]):
    """The front's CPU scaled by the mean drift of the workers' cores (the front is not
    pinned; it runs wherever a core is free)."""
    if front is None or not factors:
        return front
    f = float(np.mean(list(factors.values())))
    return replace(front, cpu_per_request_s=front.cpu_per_request_s * f,
                   cpu_per_token_s=front.cpu_per_token_s * f,
                   cpu_per_prompt_token_s=front.cpu_per_prompt_token_s * f)


def _contended(wl: pd.DataFrame, profile, layout: str, front, slo: Slo, config,
               seed: int | None):
    """({worker: step-time factor}, SimResult) with the front's CPU taken from the workers'
    cores (module docstring); without a front, the plain simulation."""
    from gpuprobe.perf.contention import arrival_stalled, busy_stretch, stretched
    from gpuprobe.sim.simulator import simulate

    roles = ("mixed",) if layout == "monolithic" else ("prefill", "decode")
    if layout == "monolithic" and front is not None:
        profile, front = arrival_stalled(profile, front)
    keys = {r: "monolithic" if r == "mixed" else f"{layout}.{r}" for r in roles}
    factor = dict.fromkeys(keys.values(), 1.0)
    res = simulate(wl, profile, layout, slo, config, seed)
    if front is None:
        return factor, res
    tokens = float(wl["output_tokens"].mean())
    prompts = float(wl["prompt_tokens"].mean())
    rate = (len(wl) - 1) / (float(wl["arrival_s"].iloc[-1]) or 1.0)
    for _ in range(CONTENTION_PASSES):
        span = res.summary.get("span_s") or 0.0
        name = {"mixed": "monolithic"}
        busy = {keys[r]: res.summary.get(f"{name.get(r, r)}_busy_s", 0.0) / span if span > 0
                else 1.0 for r in roles}
        factor = busy_stretch(front, rate, tokens, busy, pinned=layout != "monolithic",
                              prompt_tokens_per_request=prompts)
        res = simulate(wl, stretched(profile, factor), layout, slo, config, seed)
    return factor, res
