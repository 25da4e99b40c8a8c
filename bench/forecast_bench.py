"""Forecast bench: the issue's bars on the bundled Azure traces (10 s buckets, 60 s horizon,
rolling origins in the second half, every --stride) and the time to forecast all series of a
trace, with each candidate's fit time beside the baselines'.

    .venv/bin/python bench/forecast_bench.py [--stride 30] [--traces azure-conv,azure-code]
"""
from __future__ import annotations

import argparse
import sys
import time

import pandas as pd


def main() -> int:
    from gpuprobe.forecast import forecast_workload
    from gpuprobe.forecast.evaluate import evaluate, second_half_origins
    from gpuprobe.workloads.loading import load_workload
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", type=float, default=30.0, help="seconds between origins")
    ap.add_argument("--traces", default="azure-conv,azure-code")
    args = ap.parse_args()
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    for name in args.traces.split(","):
        df = load_workload(None, name)
        forecast_workload(df.head(2000))  # warm the statsmodels imports before timing
        t0 = time.perf_counter()
        res = forecast_workload(df)
        took = time.perf_counter() - t0
        print(f"\n{name}: all three series in {took:.2f} s (5 s bar)")
        fits = pd.DataFrame([b for b in res["backtest"] if "fit_s" in b])
        print(fits.pivot_table(index="model", columns="series", values="fit_s").round(3).to_string())
        origins = second_half_origins(df, 10.0, 60.0, args.stride)
        t0 = time.perf_counter()
        table = evaluate(df, 10.0, 60.0, origins, series=("prefill", "decode", "requests"),
                         progress=lambda m: print(m, file=sys.stderr, end="\r"))
        print(f"rolling origins: {len(origins)} in {time.perf_counter() - t0:.0f} s")
        print(table.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
