"""Simulator speed: simulated requests per CPU-second, per layout, on the Azure conversation
trace (19,366 requests, native arrival rate) with a roofline llama3-8b / H200 profile.

Baseline in the same run: the same simulation with macro-steps disabled (every decode step
through Scheduler.schedule() and postprocess(), as the reference server steps), on the first
2,000 requests. CPU time (process_time), so other processes on the machine count less; the
fastest of --repeat runs, because a shared 2-core VM still slows a run by up to ~30%.

    .venv/bin/python bench/sim_bench.py [--limit N] [--repeat 3]
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.sim import engine as sim_engine
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.sim.layouts import LAYOUTS, LayoutConfig
from gpuprobe.sim.simulator import simulate
from gpuprobe.workloads.loading import bundled_trace


def load_conv(limit: int | None) -> pd.DataFrame:
    raw = pd.read_csv(bundled_trace("azure-conv"), nrows=limit)
    ts = pd.to_datetime(raw["TIMESTAMP"])
    return pd.DataFrame({"arrival_s": (ts - ts.iloc[0]).dt.total_seconds(),
                         "prompt_tokens": raw["ContextTokens"], "output_tokens": raw["GeneratedTokens"]})


def config() -> LayoutConfig:
    kw = dict(max_num_seqs=256, max_num_batched_tokens=16384, num_blocks=40000)
    return LayoutConfig(*(SchedulerConfig(role=r, **kw) for r in ("mixed", "prefill", "decode")))


def rate(wl, profile, layout, repeat: int = 1) -> tuple[float, dict]:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        res = simulate(wl, profile, layout, config=config())
        best = min(best, time.process_time() - t0)
    return len(wl) / best, res.summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    profile = roofline_profile("llama3-8b", "h200")
    wl, small = load_conv(args.limit), load_conv(2000)
    print("| layout | simulated req/s (CPU) | steps | macro-steps | baseline req/s | speed-up |")
    print("|---|---|---|---|---|---|")
    for layout in LAYOUTS:
        fast, summ = rate(wl, profile, layout, args.repeat)
        saved = sim_engine.MIN_MACRO_STEPS
        sim_engine.MIN_MACRO_STEPS = 10 ** 9
        try:
            slow, _ = rate(small, profile, layout)
        finally:
            sim_engine.MIN_MACRO_STEPS = saved
        key = "monolithic" if layout == "monolithic" else "decode"
        print(f"| {layout} | {fast:,.0f} | {summ[f'{key}_steps']:,} | {summ[f'{key}_macro_steps']:,} "
              f"| {slow:,.0f} | {fast / slow:.1f}x |")


if __name__ == "__main__":
    main()
