"""Forecast bench: the issue's bars.

1. The bundled Azure traces at 10 s buckets, 60 s horizon, rolling origins every --stride in the
   second half: the chosen forecast's MAE against the best of last/MA3/MA6/MA12 (bar <= 1.0) and
   its 80% cover (bar 75-85%); and the time to forecast all three series once (bar 5 s).
2. Four weeks with a daily cycle (forecast_cycle.py, 20 req/s in aggregate form) at 1-minute
   buckets and a 1-hour horizon, origins every --cycle-stride over the last week: MAE against
   the best non-seasonal baseline (bar <= 0.8) and the daily seasonal naive (bar <= 0.95); and
   the time to forecast all three series once (bar 30 s).
Each one-off forecast prints every candidate's fit time (s) beside the baselines'.

    .venv/bin/python bench/forecast_bench.py [--stride 30] [--traces azure-conv,azure-code]
                                             [--cycle-stride 7h] [--skip-cycle] [--skip-azure]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd

from forecast_cycle import cycle_frame

SERIES = ["prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s"]
COLS = ["series", "origins", "mae", "best_baseline", "ratio_to_best", "coverage80", "coverage95", "models"]


def once(frame: pd.DataFrame, bucket_s: float, horizon_s: float, bar_s: float, label: str) -> None:
    """One forecast of all series from the end of `frame`, timed, with per-candidate fit times."""
    from gpuprobe.forecast.workload import forecast_frame
    t0 = time.perf_counter()
    res = forecast_frame(frame, bucket_s, horizon_s, len(frame) * bucket_s, SERIES, [])
    took = time.perf_counter() - t0
    print(f"\n{label}: all three series in {took:.2f} s = {took / bar_s:.2f}x the {bar_s:g} s bar "
          f"(chosen: {', '.join(res['series'][s]['model'] for s in SERIES)})")
    fits = pd.DataFrame([b for b in res["backtest"] if "fit_s" in b and b["kind"] != "combination"])
    table = fits.pivot_table(index=["kind", "model"], columns="series", values="fit_s")
    print(table.round(3).to_string())


def azure(names: list[str], stride_s: float) -> None:
    from gpuprobe.forecast.evaluate import evaluate_frame, second_half_origins
    from gpuprobe.forecast.series import bucket_series
    from gpuprobe.workloads.loading import load_workload
    for name in names:
        df = load_workload(None, name)
        full = bucket_series(df, 10.0, (np.floor(df["arrival_s"].max() / 10.0) + 1) * 10.0)
        once(full.iloc[:-1], 10.0, 60.0, 5.0, name)
        origins = second_half_origins(df, 10.0, 60.0, stride_s)
        t0 = time.perf_counter()
        table = evaluate_frame(full, 10.0, 60.0, origins, series=SERIES,
                               progress=lambda m: print(m, file=sys.stderr, end="\r"))
        print(f"rolling origins: {len(origins)} in {time.perf_counter() - t0:.0f} s "
              f"(bars: ratio_to_best <= 1.0, coverage80 75-85%, prefill and decode)")
        print(short(table[COLS]).to_string(index=False))


def cycle(stride_s: float) -> None:
    from gpuprobe.forecast.evaluate import evaluate_frame
    from gpuprobe.workloads.loading import load_workload
    t0 = time.perf_counter()
    full = cycle_frame(load_workload(None, "azure-conv"))
    print(f"\nfour weeks, daily cycle, 20 req/s ({full['requests_per_s'].sum() * 60:,.0f} requests in "
          f"{len(full):,} 1-minute buckets), drawn in {time.perf_counter() - t0:.1f} s")
    once(full, 60.0, 3600.0, 30.0, "four weeks")
    end = len(full) * 60.0
    origins = [float(t) for t in np.arange(end - 7 * 86_400.0, end - 3600.0 + 1e-9, stride_s)]
    t0 = time.perf_counter()
    table = evaluate_frame(full, 60.0, 3600.0, origins, series=SERIES[:2], period=1440,
                           progress=lambda m: print(m, file=sys.stderr, end="\r"))
    print(f"rolling origins: {len(origins)} in {time.perf_counter() - t0:.0f} s "
          f"(bars: ratio_to_best <= 0.8 of last/MA3/MA6/MA12, ratio_to_seasonal_naive <= 0.95)")
    print(short(table[COLS + ["mae_seasonal_naive", "ratio_to_seasonal_naive"]]).to_string(index=False))


def short(table: pd.DataFrame) -> pd.DataFrame:
    """Rounded, with only the two most chosen models (a combination's members vary in order)."""
    out = table.round(3)
    out["models"] = out["models"].map(lambda m: "; ".join(m.split("; ")[:2]) + ("; ..." if m.count("; ") > 1 else ""))
    return out


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", type=float, default=30.0, help="seconds between Azure origins")
    ap.add_argument("--traces", default="azure-conv,azure-code")
    ap.add_argument("--cycle-stride", default="7h", help="time between four-week origins (7h: all phases of a day)")
    ap.add_argument("--skip-azure", action="store_true")
    ap.add_argument("--skip-cycle", action="store_true")
    args = ap.parse_args()
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    from gpuprobe.forecast.choose import forecast_series
    forecast_series(np.random.default_rng(0).poisson(5.0, 300).astype(float), 6)  # warm the imports
    if not args.skip_azure:
        azure(args.traces.split(","), args.stride)
    if not args.skip_cycle:
        cycle(seconds(args.cycle_stride))
    return 0


if __name__ == "__main__":
    sys.exit(main())
