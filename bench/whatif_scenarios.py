"""Issue 48's three scenarios: gpuprobe's answer for 8 GPUs beside AIConfigurator's.

    .venv/bin/python bench/whatif_scenarios.py [--gpus h200,h100] [--scenarios a,b,c]

Llama-3.1-8B with the vLLM silicon data (`profile --spec GPU --engine vllm`), fixed lengths,
Poisson arrivals at 10 req/s, `recommend --devices 8 --link nvlink` (one 8-GPU host):
(a) ISL 4000 / OSL 500, TTFT <= 1 s, TPOT <= 20 ms; (b) 1000 / 1000, 500 ms, 15 ms;
(c) 8000 / 200, 2 s, 30 ms; attainment 90% (the default: TTFT and TPOT met by 9 requests
in 10). For each it prints gpuprobe's choice (TP per side, copies over the 8 GPUs), its
output tokens/s per GPU at the searched goodput and the TTFT and TPOT there (p50 / p90 over
requests), then AIConfigurator's best aggregated and disaggregated configuration
(bench/aic_scenarios.json, from `aiconfigurator cli default`) and what gpuprobe's simulator
predicts for that configuration at AIConfigurator's request rate under Poisson arrivals.
The baseline of the same run: the goodput of vLLM's default (monolithic TP1 x8, chunked
prefill at 8192 tokens), searched the same way, so gpuprobe's answer also reads as a ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
SCENARIOS = {"a": (4000, 500, "ttft=1s,tpot=20ms"), "b": (1000, 1000, "ttft=500ms,tpot=15ms"),
             "c": (8000, 200, "ttft=2s,tpot=30ms")}
AIC = json.loads((Path(__file__).parent / "aic_scenarios.json").read_text())


def workload(isl: int, osl: int, n: int, rate: float = 10.0, seed: int = 0):
    import numpy as np
    import pandas as pd
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    return pd.DataFrame({"arrival_s": arrival - arrival[0], "prompt_tokens": isl,
                         "output_tokens": osl})


def aic_candidates(run: dict):
    """AIConfigurator's best aggregated and disaggregated units as gpuprobe Candidates (vLLM's
    default scheduling for aggregated: chunked prefill, 8192 tokens a step)."""
    from gpuprobe.decide.candidates import Candidate
    a, d = run["agg"], run["disagg"]
    return {"agg": (Candidate("monolithic", 8192, tp=a["tp"]), a),
            "disagg": (Candidate("cross", num_prefill=d["prefill_workers"],
                                 num_decode=d["decode_workers"], prefill_tp=d["prefill_tp"],
                                 decode_tp=d["decode_tp"]), d)}


def fmt_ms(s) -> str:
    return "-" if s is None or s != s else f"{s * 1e3:.0f}"


def one(gpu: str, key: str, n: int) -> list[str]:
    from gpuprobe.decide.candidates import Candidate
    from gpuprobe.decide.predict import predict
    from gpuprobe.decide.recommend import recommend, with_link
    from gpuprobe.decide.search import SEARCH_REQUESTS, base_rate, search_candidates, thinned
    from gpuprobe.decide.slo import parse_slo
    from gpuprobe.perf.silicon_profile import spec_profile

    isl, osl, slo_text = SCENARIOS[key]
    slo = parse_slo(slo_text)
    profile = spec_profile("llama3-8b", gpu, "vllm")
    wl = workload(isl, osl, n)
    t, c0 = time.perf_counter(), time.process_time()
    rec = recommend(wl, profile, slo, devices=8, link="nvlink")
    wall, cpu = time.perf_counter() - t, time.process_time() - c0
    best = rec.candidates[0]
    prof = with_link(profile, "nvlink")
    base = search_candidates(wl, prof, [Candidate("monolithic", 8192)], slo)[0][
        "max_goodput_rps_per_device"]
    g = rec.max_goodput_rps_per_device
    a = best["at_goodput"]
    copies = f" x{rec.deployment.replicas}" if rec.deployment.replicas > 1 else ""
    lines = [f"{gpu}/{key} gpuprobe: {rec.label}{copies} ({rec.deployment.devices} GPUs), "
             f"{g * osl:.0f} tok/s/GPU ({g:.3g} req/s/GPU; {g / base:.2f}x the baseline, vLLM's "
             f"default monolithic TP1 x8 {base * osl:.0f}), TTFT p50/p90 {fmt_ms(a.get('ttft_p50_s'))}/"
             f"{fmt_ms(a.get('ttft_p90_s'))} ms, TPOT p50/p90 {fmt_ms(a.get('tpot_p50_s'))}/"
             f"{fmt_ms(a.get('tpot_p90_s'))} ms; runner-up {rec.runner_up} "
             f"({rec.margin:+.0%}); search {wall:.1f} s wall, {cpu:.1f} s CPU, "
             f"{rec.search['candidates']} searched, {len(rec.search['pruned'])} pruned"]
    run = AIC["runs"][f"{gpu}/{key}"]
    unit = rec.deployment.unit
    whole = predict(wl, prof, unit, slo, g * unit.devices / base_rate(wl))
    lines.append(f"  gpuprobe's choice at its goodput over all {len(wl)} requests "
                 f"({len(wl) / (g * unit.devices):.0f} s of load, not the search's "
                 f"{SEARCH_REQUESTS * unit.devices}): SLO met by {whole['slo_attainment']:.0%}, TPOT "
                 f"p90 {fmt_ms(whole.get('tpot_p90_s'))} ms, TTFT p90 "
                 f"{fmt_ms(whole.get('ttft_p90_s'))} ms")
    for mode, (cand, fig) in aic_candidates(run).items():
        scale = fig["req_per_s_total"] * cand.devices / 8 / base_rate(wl)
        s = predict(thinned(wl, SEARCH_REQUESTS * cand.devices), prof, cand, slo, scale)
        full = predict(wl, prof, cand, slo, scale)
        mark = "*" if run["chosen"] == mode else " "
        lines.append(
            f"  AIC {mode:<6}{mark} {cand.label} x{8 // cand.devices}: "
            f"{fig['tokens_per_s_per_gpu']:.0f} tok/s/GPU ({fig['req_per_s_total'] / 8:.3g} "
            f"req/s/GPU), TTFT {fig['ttft_ms']:.0f} ms, TPOT {fig['tpot_ms']:.1f} ms | gpuprobe "
            f"at that rate, Poisson, the search's sample: TTFT p50/p90 {fmt_ms(s.get('ttft_p50_s'))}/"
            f"{fmt_ms(s.get('ttft_p90_s'))} ms, TPOT p50/p90 {fmt_ms(s.get('tpot_p50_s'))}/"
            f"{fmt_ms(s.get('tpot_p90_s'))} ms, SLO met by {s['slo_attainment']:.0%} "
            f"(all {len(wl)} requests: {full['slo_attainment']:.0%}, TTFT p50 "
            f"{fmt_ms(full.get('ttft_p50_s'))} ms, TPOT p90 {fmt_ms(full.get('tpot_p90_s'))} ms)")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="h200,h100")
    ap.add_argument("--scenarios", default="a,b,c")
    ap.add_argument("--requests", type=int, default=4000, help="workload length (default 4000)")
    args = ap.parse_args()
    for gpu in args.gpus.split(","):
        for key in args.scenarios.split(","):
            print("\n".join(one(gpu, key, args.requests)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
