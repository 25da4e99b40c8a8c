"""A store with something on every dashboard page, written through the store's own API (the
rows recommend, forecast, validate and the autopilot write, with their documented shapes).
Figures are chosen so tests can assert them: 2 GPUs, 1 host, 240 server requests, a switch
from monolithic to intra at T0 + 300 s, recommendation #1 (intra 70%, goodput 3.25)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from gpuprobe.store import Sample, Store

T0 = 1_700_000_000.0
SPAN_S = 600
HOST = "node-a"
NUM_REQUESTS = 240
SWITCH_S = T0 + 300


def fill(path, gpus: bool = True, requests: bool = True, decisions: bool = True, t0: float = T0,
         switch: bool = True) -> Store:
    """Fill the store at `path`; `t0` moves every timestamp (a live test wants the last minutes)."""
    store = Store.open(path)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(SPAN_S):
        t = t0 + i
        rows += [Sample(t, HOST, "host", "cpu", "cpu_util_pct", 40.0 + 10 * np.sin(i / 30)),
                 Sample(t, HOST, "host", "memory", "mem_used_bytes", 8 * 2.0 ** 30)]
        if gpus:
            for g in ("gpu0", "gpu1"):
                rows += [Sample(t, HOST, "gpm", g, "sm_util_pct", 55.0 + rng.normal()),
                         Sample(t, HOST, "gpm", g, "sm_occupancy_pct", 30.0),
                         Sample(t, HOST, "gpm", g, "dram_bw_util_pct", 70.0),
                         Sample(t, HOST, "gpm", g, "tensor_util_pct", 20.0),
                         Sample(t, HOST, "nvml", g, "mem_used_bytes", 60 * 2.0 ** 30),
                         Sample(t, HOST, "nvml", g, "power_w", 450.0)]
    store.insert_samples(rows)
    store.start_run("serve-1", "serve", HOST, {"model": "tiny", "layout": "monolithic"})
    if requests:
        arr = t0 + np.sort(rng.uniform(0, SPAN_S, NUM_REQUESTS))
        store.insert_requests([{"run_id": "serve-1", "source": "server", "request_id": f"r{i}", "host": HOST,
                                "arrival_s": float(a), "prompt_tokens": 200, "output_tokens": 50,
                                "ttft_s": 0.05, "tbt_p50_s": 0.02, "tbt_p99_s": 0.04, "status": "ok"}
                               for i, a in enumerate(arr)])
    if switch:
        store.insert_layout_events([{"ts_s": t0 + 300, "host": HOST, "run_id": "serve-1", "from_layout": "monolithic",
                                     "to_layout": "intra", "prefill_share": 0.7, "actor": "admin", "status": "ok"}])
    store.insert_events([{"ts_s": t0 + 100, "host": HOST, "source": "agent", "device": "", "kind": "samples_dropped",
                          "message": "dropped 500 samples (buffer full)"},
                         {"ts_s": t0 + 200, "host": HOST, "source": "nvml", "device": "gpu1", "kind": "gpu_lost",
                          "message": "gpu1 (GPU-x) lost: GPU is lost"}])
    wl = pd.DataFrame({"arrival_s": np.arange(300) * 2.0, "prompt_tokens": np.r_[np.full(150, 1000), np.full(150, 50)],
                       "output_tokens": np.r_[np.full(150, 20), np.full(150, 400)]})
    store.save_workload("wl-shift", wl)
    store.save_workload("wl-steady", wl.assign(prompt_tokens=300, output_tokens=100))
    cand = {"ttft_p50_s": 0.1, "ttft_p99_s": 0.5, "tbt_p50_s": 0.02, "tbt_p99_s": 0.05, "slo_attainment": 0.99}
    store.insert_recommendation({
        "workload": "wl-shift", "layout": "intra", "prefill_share": 0.7, "params": {"prefill_share": 0.7},
        "confidence": 0.8, "confidence_label": "high", "margin": 0.18, "max_goodput_rps_per_device": 3.25,
        "slo": {"ttft_s": 2.0, "tbt_s": 0.1},
        # best first, as recommend stores them (decide.rank)
        "candidates": [{"layout": "intra", "params": {"prefill_share": 0.7}, **cand,
                        "max_goodput_rps_per_device": 3.25},
                       {"layout": "monolithic", "params": {}, **cand, "max_goodput_rps_per_device": 2.75},
                       {"layout": "cross", "params": {"num_prefill": 1, "num_decode": 1}, **cand,
                        "max_goodput_rps_per_device": 1.5}],
        "reasons": [{"text": "prompt:output ratio 5.2 moves to 0.1 at 300 s", "evidence": {"ratio": 5.2}}]})
    # prefill's note as older stores hold it (plain text), decode's as store_forecast writes it
    # now: JSON with the series' backtest rows
    backtest = [{"series": "decode_tokens_per_s", "model": model, "mae": mae, "mase": mae / 20, "coverage80": 0.8,
                 "coverage95": 0.95, "fit_s": 0.01, "chosen": model == "ets"} for model, mae in (("ets", 10.0), ("ma3", 14.0))]
    notes = {"prefill_tokens_per_s": "seasonality: none found",
             "decode_tokens_per_s": json.dumps({"note": "seasonality: none found", "backtest": backtest})}
    store.insert_forecasts([{"created_s": t0 + SPAN_S, "forecast_id": "fc-1", "workload": "wl-shift", "model": "ets", "metric": m,
                             "target_s": 600.0 + 10 * k, "value": v, "lo80": v * 0.8, "hi80": v * 1.2,
                             "lo95": v * 0.6, "hi95": v * 1.4, "as_of_s": 600.0, "bucket_s": 10.0,
                             "horizon_s": 60.0, "note": notes[m]}
                            for m, v in (("prefill_tokens_per_s", 500.0), ("decode_tokens_per_s", 120.0))
                            for k in range(6)])
    vrows = [{"layout": lay, "metric": m, "predicted": p, "measured": q, "rel_error": (p - q) / q}
             for lay in ("monolithic", "intra") for m, p, q in (("ttft_p50_s", 0.11, 0.10), ("tbt_p50_s", 0.021, 0.02))]
    store.insert_validation({"workload": "wl-shift", "model": "tiny", "device": "cpu", "best_measured": "monolithic",
                             "best_predicted": "monolithic", "bar_met": 1,
                             "body": {"rows": vrows, "best_measured": "monolithic", "best_predicted": "monolithic",
                                      "measured_range": {"monolithic": {"ttft_p50_s": [0.095, 0.105]}},
                                      "summary": {"monolithic": {"median_abs_rel_error_p50": 0.075,
                                                                 "slo_attainment_measured": 1.0},
                                                  "intra": {"median_abs_rel_error_p50": 0.075,
                                                            "slo_attainment_measured": 0.9}}}})
    if decisions:
        store.insert_decision({"ts_s": t0 + 310, "target": "http://127.0.0.1:8000", "current_layout": "monolithic",
                               "chosen_layout": "intra", "action": "switch", "reason": "decode-heavy ahead",
                               "predicted": {"tbt_p99_s": 0.05}})
    return store
