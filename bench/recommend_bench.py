"""The whole recommend search on the Azure conversation trace with the H200 roofline.

    .venv/bin/python bench/recommend_bench.py [--devices 5] [--workload azure-conv]

Prints the search's wall time, simulations and each candidate's simulator time, against a
baseline measured in the same run: one plain simulation of the whole trace at its own rate
(monolithic), so the ratio reads as "the search costs N whole-trace simulations". Issue 36's
bar: at least 20 candidates, goodput searched for each, at most 30 s on one core.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=5)
    ap.add_argument("--workload", default="azure-conv")
    args = ap.parse_args()
    from gpuprobe.decide.candidates import Candidate
    from gpuprobe.decide.predict import predict
    from gpuprobe.decide.recommend import recommend
    from gpuprobe.decide.slo import SLO_PRESETS
    from gpuprobe.perf.roofline import roofline_profile
    from gpuprobe.workloads.loading import as_workload, read_workload

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    wl = as_workload(read_workload("/nonexistent-bench.db", args.workload))
    profile = roofline_profile("llama3-8b", "h200")
    slo = SLO_PRESETS["chat"]
    t = time.perf_counter()
    predict(wl, profile, Candidate("monolithic"), slo)
    base_s = time.perf_counter() - t
    t = time.perf_counter()
    rec = recommend(wl, profile, slo, devices=args.devices, workload_name=args.workload)
    total = time.perf_counter() - t
    print(f"{args.workload}: {len(wl)} requests; baseline: one whole-trace monolithic simulation "
          f"{base_s:.2f} s")
    print(f"{'candidate':<26} {'goodput/dev':>11} {'runs':>5} {'sim s':>7}")
    for r in rec.candidates:
        print(f"{r['label']:<26} {r['max_goodput_rps_per_device']:>11.3g} {r['simulations']:>5} "
              f"{r['sim_s']:>7.2f}")
    s = rec.search
    print(f"search: {s['candidates']} candidates, {s['simulations']} simulations on "
          f"samples of up to {s['sample_requests']} requests, {total:.1f} s = {total / base_s:.1f}x the baseline "
          f"(bar: 30 s) -> {rec.label}")
    return 0 if total <= 30 and s["candidates"] >= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
