"""`gpuprobe forecast`: forecast a workload's prefill/decode mix, with the backtest behind it."""
from __future__ import annotations

import json
import math
import sys

from gpuprobe.cli.flags import add_source_flags

NAME = "forecast"
HELP = "forecast prefill/decode tokens/s and requests/s with backtested, calibrated intervals"


def add_arguments(p) -> None:
    p.add_argument("--workload", help="workload name in the store, or a trace file / bundled alias")
    p.add_argument("--live", action="store_true",
                   help="forecast what a running server, the tap or the agent recorded in the store")
    p.add_argument("--window", default="1h", help="--live: how much recent history (default 1h)")
    add_source_flags(p, "forecast the engines' rates a Prometheus holds (with --since, --until)")
    p.add_argument("--bucket", default="10s", help="bucket width (default 10s)")
    p.add_argument("--horizon", default="60s", help="how far ahead (default 60s)")
    p.add_argument("--as-of", help="origin, seconds from the workload's start: only data before it is used")
    p.add_argument("--series", default="prefill,decode,requests",
                   help="comma list of prefill, decode, requests, prompt_length, output_length, share")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-store", action="store_true", help="do not write the forecast to the store")


def _check_as_of(as_of: float | None, last_s: float, bucket_s: float, text: str) -> None:
    """A workload's time after its last request is the end of the trace, not a lull: an origin
    past the bucket holding it forecast zeros from the silence (and stored them)."""
    from gpuprobe.errors import UserError
    end = (math.floor(last_s / bucket_s) + 1) * bucket_s
    if as_of is not None and as_of > end:
        raise UserError(f"--as-of: {text!r} is past the workload's end ({end:g} s, the end of "
                        f"the bucket of its last request); give at most {end:g}s")


def run(args) -> int:
    from gpuprobe.errors import UserError
    from gpuprobe.forecast import forecast_workload, store_forecast
    from gpuprobe.units import parse_duration
    from gpuprobe.workloads.loading import read_workload

    bucket_s = parse_duration(args.bucket, "--bucket")
    horizon_s = parse_duration(args.horizon, "--horizon")
    as_of = parse_duration(args.as_of, "--as-of") if args.as_of is not None else None
    series = [s.strip() for s in args.series.split(",") if s.strip()]
    if not series:  # an empty list forecast nothing and stored an empty forecast, exit 0
        raise UserError(f"--series: {args.series!r} names no series; give some of prefill, decode, "
                        "requests, prompt_length, output_length, share")
    say = lambda m: print(f"forecast: {m}", file=sys.stderr, flush=True)  # noqa: E731
    if sum(map(bool, (args.workload, args.live, args.source))) != 1:
        raise UserError("give one of --workload NAME, --live or --source prometheus=URL")
    if args.workload:
        df = read_workload(args.store, args.workload)
        if df.empty:
            raise UserError(f"workload {args.workload!r} has no requests")
        _check_as_of(as_of, float(df["arrival_s"].max()), bucket_s, args.as_of)
        result = forecast_workload(df, bucket_s, horizon_s, as_of, series, progress=say)
        name = args.workload
    elif args.live:
        from gpuprobe.forecast import forecast_live
        from gpuprobe.store import Store
        with Store.open(args.store) as store:
            result = forecast_live(store, parse_duration(args.window, "--window"), bucket_s, horizon_s,
                                   series, progress=say)
        name = "live"
    else:
        result, name = _from_source(args, bucket_s, horizon_s, series, say)
    if not args.no_store:
        from gpuprobe.store import Store
        with Store.open(args.store) as store:
            result["forecast_id"] = store_forecast(store, result, name)
    if args.json:
        print(json.dumps(result))
        return 0
    _print(result)
    return 0


def _from_source(args, bucket_s: float, horizon_s: float, series, say):
    import math

    from gpuprobe.forecast.live import rates_frame
    from gpuprobe.forecast.series import full_name
    from gpuprobe.forecast.workload import forecast_frame
    from gpuprobe.sources import open_source, time_range
    from gpuprobe.sources.prom_mix import bucket_mix

    src = open_source(args.source)
    start, end = time_range(args.since, args.until)
    mix = bucket_mix(src.api, start, end, bucket_s)
    n = math.floor((end - start) / bucket_s)
    as_of = n * bucket_s
    # every bucket of the range, in order (a bucket Prometheus had nothing for is idle)
    mix = mix.assign(k=(mix["start_s"] / bucket_s).round().astype(int)).set_index("k").reindex(range(n))
    mix["start_s"] = [k * bucket_s for k in range(n)]
    names = [full_name(s) for s in series]
    result = forecast_frame(rates_frame(mix), bucket_s, horizon_s, as_of, names,
                            ["from the engines' counters in Prometheus: requests/s counts finished requests"],
                            progress=say)
    result["window_start_s"] = start
    return result, str(src)


def _print(r: dict) -> None:
    print(f"as of {r['as_of_s']:g} s, {r['bucket_s']:g} s buckets, {r['horizon_s']:g} s ahead"
          + (f" (stored as {r['forecast_id']})" if r.get("forecast_id") else ""))
    for n in r["notes"]:
        print(f"note: {n}")
    for name, s in r["series"].items():
        print(f"\n{name}: {s['model']} ({s['interval']} intervals)  {s['note']}")
        print(f"{'t_s':>10} {'mean':>10} {'lo80':>10} {'hi80':>10} {'lo95':>10} {'hi95':>10}")
        for i, t in enumerate(s["t_s"]):
            print(f"{t:>10,.0f} " + " ".join(f"{s[c][i]:>10,.2f}" for c in ("mean", "lo80", "hi80", "lo95", "hi95")))
    print(f"\n{'series':<22} {'model':<20} {'MAE':>10} {'MASE':>6} {'cov80':>6} {'cov95':>6} {'fit_s':>6}")
    for b in r["backtest"]:
        if "mae" not in b:
            print(f"{b['series']:<22} {b['model']:<20} failed: {b.get('note', '')}")
            continue
        mase = f"{b['mase']:.2f}" if b.get("mase") is not None else "-"
        mark = " *" if b.get("chosen") else ""
        print(f"{b['series']:<22} {b['model']:<20} {b['mae']:>10,.2f} {mase:>6} {b['coverage80']:>6.0%} "
              f"{b['coverage95']:>6.0%} {b['fit_s']:>6.2f}{mark}")
