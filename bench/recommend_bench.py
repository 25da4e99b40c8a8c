"""The whole recommend search on the Azure conversation trace with the H200 roofline.

    .venv/bin/python bench/recommend_bench.py [--devices 8] [--workload azure-conv] [--tp 1,2,4,8]

Prints the search's wall and CPU time, simulations and each candidate's simulator time,
against a baseline measured in the same run: one plain simulation of the whole trace at its
own rate (monolithic), so the ratio reads as "the search costs N whole-trace simulations".
The profile carries its workers at TP 1, 2, 4 and 8 (`--tp 1`: TP1 only, the search before
TP). Bars: issue 36's, at least 20 candidates weighed, each searched or shown unable to win;
issue 48's, the 8-device search over TP 1/2/4/8 within 30 s on one core.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--workload", default="azure-conv")
    ap.add_argument("--tp", default="1,2,4,8", help="TP sizes the profile carries")
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
    sizes = {int(x) for x in args.tp.split(",")}
    profile = replace(profile, tp_workers={t: w for t, w in profile.tp_workers.items() if t in sizes})
    slo = SLO_PRESETS["chat"]
    c0 = time.process_time()
    predict(wl, profile, Candidate("monolithic"), slo)
    base_s = time.process_time() - c0
    t, c0 = time.perf_counter(), time.process_time()
    rec = recommend(wl, profile, slo, devices=args.devices, workload_name=args.workload)
    total, cpu = time.perf_counter() - t, time.process_time() - c0
    print(f"{args.workload}: {len(wl)} requests; baseline: one whole-trace monolithic simulation "
          f"{base_s:.2f} s CPU")
    print(f"{'candidate':<26} {'goodput/dev':>11} {'runs':>5} {'sim s':>7}")
    for r in rec.candidates:
        print(f"{r['label']:<26} {r['max_goodput_rps_per_device']:>11.3g} {r['simulations']:>5} "
              f"{r['sim_s']:>7.2f}")
    s = rec.search
    weighed = s["candidates"] + len(s["pruned"])
    print(f"search: {weighed} candidates weighed ({s['candidates']} searched, {len(s['pruned'])} "
          f"shown unable to win by their bound, {len(s['refused'])} TP sizes refused for memory), "
          f"{s['simulations']} simulations on samples of up to {s['sample_requests']} requests, "
          f"{total:.1f} s wall, {cpu:.1f} s CPU = {cpu / base_s:.1f}x the baseline (bar: 30 s) "
          f"-> {rec.label} x{rec.deployment.replicas}")
    return 0 if cpu <= 30 and weighed >= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
