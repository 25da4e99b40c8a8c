"""How much a validate run replays, and how fast, from monolithic's first measurements: its
simulated capacity, the plan (plan.make_plan fed with this run's start, calibration pass and
simulation times) and the line that says the rate."""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.errors import GpuprobeError
from gpuprobe.sim.layouts import LayoutConfig
from gpuprobe.validate.options import ValidateOptions
from gpuprobe.validate.replay_rate import replay_rate, schedule_frame

DEFAULT_LOAD = 0.5    # the busiest stretch at half the monolithic capacity (replay_rate.py)


def plan_run(wl: pd.DataFrame, capacity: float, probe, opts: ValidateOptions, start_s: float,
             spent_s: float):
    """plan.make_plan with this run's measurements: monolithic's start and pass,
    the replay's drain from monolithic's simulation, the predictions' time from one run."""
    from gpuprobe.sim.predict import CONTENTION_PASSES
    from gpuprobe.sim.simulator import simulate
    from gpuprobe.validate.plan import DRAIN_MARGIN, REPLAY_OVERHEAD_S, make_plan, timed

    load = DEFAULT_LOAD if opts.load is None else opts.load
    t = wl["arrival_s"].to_numpy(float)
    prof, config = _monolithic(probe)
    sim_s = []

    def schedule_for(span_s: float):
        return replay_rate(t, capacity, load, opts.load_basis, opts.rate_rps, opts.max_idle_s,
                           span_s)

    def replay_s_for(rate) -> float:
        res, took = timed(lambda: simulate(schedule_frame(wl, rate), prof, "monolithic",
                                           opts.slo, config))
        sim_s.append(took)
        return DRAIN_MARGIN * float(res.summary.get("span_s") or rate.arrival_s[-1]) \
            + REPLAY_OVERHEAD_S

    first = schedule_for(1e9)  # the simulation's own time, on the whole workload
    replay_s_for(first)
    # per seed: each layout, each replay, the contention passes, and the unadjusted twin;
    # a split layout simulates two workers (about twice monolithic's time)
    weight = sum(1 if x == "monolithic" else 2 for x in opts.layouts)
    per_seed = sim_s[0] * weight * opts.replays \
        * (1 + CONTENTION_PASSES) * 2
    layout_pass = probe.cal_runs[0]["window"]
    return make_plan(schedule_for, replay_s_for, per_seed, opts, opts.layouts, start_s,
                     layout_pass[1] - layout_pass[0], spent_s, opts.budget_s)


def planned_phases(plan) -> int:
    """Guarded phases left after monolithic's first pass, as planned."""
    per = plan.replays + (plan.passes - 1 if plan.interleave else 1)
    return sum(per + (0 if x == "monolithic" else 1) for x in plan.layouts)


def rate_line(capacity: float, rate) -> str:
    cut = (f", gaps over {rate.gap_cap_s:.2g} s cut to it ({rate.idle_cut_s:.0f} s in all)"
           if rate.idle_cut_s > 0.05 and rate.gap_cap_s is not None else "")
    return (f"monolithic capacity {capacity:.2f} req/s (simulated from its profile); replaying at "
            f"{rate.mean_rps:.1f} req/s mean ({rate.mean_load:.2f} of capacity), its busiest "
            f"{rate.peak_window} requests at {rate.peak_rps:.1f} req/s ({rate.peak_load:.2f}) "
            f"over {rate.arrival_s[-1]:.1f} s{cut}")


def capacity_rps(wl: pd.DataFrame, probe, opts: ValidateOptions) -> float:
    """Requests per second the monolithic layout finishes with every request queued at t=0."""
    from gpuprobe.sim.simulator import simulate

    prof, config = _monolithic(probe)
    res = simulate(wl.assign(arrival_s=0.0), prof, "monolithic", opts.slo, config)
    span = res.summary.get("span_s") or float("nan")
    if not np.isfinite(span) or span <= 0:
        raise GpuprobeError("could not estimate the monolithic capacity from its profile")
    engine_rps = cap = len(wl) / span
    if probe.front_cpu is None:
        return cap
    from gpuprobe.perf.contention import busy_stretch

    tokens, prompts = float(wl["output_tokens"].mean()), float(wl["prompt_tokens"].mean())
    for _ in range(30):  # the rate at which the engine, always busy, slowed by the front, keeps up
        f = busy_stretch(probe.front_cpu, cap, tokens, {"monolithic": 1.0}, pinned=False,
                         prompt_tokens_per_request=prompts)
        cap = engine_rps / f["monolithic"]
    return cap


def _monolithic(probe):
    """(profile, LayoutConfig) of monolithic as its first calibration pass measured it."""
    from gpuprobe.perf.costmodel import Overhead, Profile

    return (Profile(workers=probe.part["workers"],
                    overhead=Overhead(probe.overhead_s, 0, 0, "measured")),
            LayoutConfig(mixed=probe.scheduler_config("mixed")))
