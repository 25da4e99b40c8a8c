"""What the management report says, gathered from the store as plain data: the workload and
its mix, the recommendation, the forecast, the last validate run, GPU counters in prefill- and
decode-heavy periods, measured interference, provenance. A part the store lacks is listed in
`missing` with the command that fills it; nothing is estimated in its place.
"""
from __future__ import annotations

import json
import socket
import time

import numpy as np
import pandas as pd

from gpuprobe import __version__
from gpuprobe.decide.recommendation import Recommendation, latest_recommendation, load_recommendation
from gpuprobe.errors import UserError
from gpuprobe.store import reads
from gpuprobe.workloads.analyze import analyze
from gpuprobe.workloads.loading import bundled_trace, load_workload

COUNTERS = ("sm_util_pct", "dram_bw_util_pct", "tensor_util_pct", "power_w")
BUNDLED_LICENSE = ("Azure LLM inference trace 2023 (Azure Public Dataset), CC-BY-4.0; "
                   "see gpuprobe/data/NOTICE")


def gather(store, workload: str, rec_id: int | None = None,
           cost_per_device_hour: float | None = None, source=None,
           source_range: tuple[float, float] | None = None) -> dict:
    """Everything the report shows, as dicts, lists and DataFrames. UserError when the
    workload or an asked-for recommendation does not exist. source (a PrometheusSource) and
    source_range: read the GPU counters by phase from the fleet's Prometheus instead."""
    wl = load_workload(store, workload)
    if wl.empty:
        raise UserError(f"workload {workload!r} has no requests")
    ev: dict = {"workload": workload, "missing": [], "cost_per_device_hour": cost_per_device_hour}
    span = float(wl["arrival_s"].max() - wl["arrival_s"].min())
    bucket = max(10.0, round(span / 120 / 10) * 10)
    mix = analyze(wl, bucket_s=bucket)
    ev["mix"] = {"summary": mix.summary, "buckets": mix.buckets, "change_points_s": mix.change_points_s}
    ev["lengths"] = {"prompt": wl["prompt_tokens"].to_numpy(), "output": wl["output_tokens"].to_numpy()}
    ev["recommendation"] = _recommendation(store, workload, rec_id)
    if ev["recommendation"] is None:
        ev["missing"].append(("recommendation", f"gpuprobe recommend --workload {workload} --profile PROFILE.json"))
    ev["forecast"] = _forecast(store, workload)
    if ev["forecast"] is None:
        ev["missing"].append(("forecast", f"gpuprobe forecast --workload {workload}"))
    ev["validation"] = _validation(store, workload)
    if ev["validation"] is None:
        ev["missing"].append(("validate run", f"gpuprobe validate --workload {workload}"))
    ev["counters"] = (counters_by_phase(store) if source is None
                      else counters_by_phase_from_source(source, *source_range))
    if ev["counters"] is None:
        ev["missing"].append(("GPU counters beside served requests",
                              "gpuprobe agent --scrape http://SERVER/metrics  (while the server runs)"))
    ev["interference"] = interference(store)
    ev["num_steps"] = int(reads.table_counts(store, ("steps",))["steps"])
    if ev["interference"] is None:
        ev["missing"].append(("measured interference (engine steps)", "gpuprobe serve --store STORE  (records steps)"))
    ev["provenance"] = _provenance(store, workload, wl)
    return ev


def _recommendation(store, workload: str, rec_id: int | None) -> Recommendation | None:
    if rec_id is not None:
        rec = load_recommendation(store, rec_id)
        made_for = rec.workload_name
        if made_for and made_for != workload:  # else one workload's figures beside another's decision
            raise UserError(f"--recommendation {rec_id} was made for workload {made_for!r}, not "
                            f"{workload!r}: give --workload {made_for}, or leave --recommendation "
                            f"out for the latest of {workload!r}")
        return rec
    return latest_recommendation(store, workload)


def _forecast(store, workload: str) -> dict | None:
    rows = store.forecasts(workload)
    rows = rows[rows["forecast_id"].notna()] if "forecast_id" in rows else rows.iloc[0:0]
    if rows.empty:
        return None
    last = rows.sort_values("created_s")["forecast_id"].iloc[-1]
    part = rows[rows["forecast_id"] == last].sort_values(["metric", "target_s"])
    return {"forecast_id": last, "rows": part, "as_of_s": float(part["as_of_s"].iloc[0]),
            "bucket_s": float(part["bucket_s"].iloc[0]),
            "models": part.groupby("metric")["model"].first().to_dict()}


def _validation(store, workload: str) -> dict | None:
    rows = store.validations(workload)
    if rows.empty:
        return None
    last = rows.iloc[-1]
    body = json.loads(last["body"]) if isinstance(last["body"], str) else last["body"]
    return {"created_s": float(last["created_s"]), "best_measured": last["best_measured"],
            "best_predicted": last["best_predicted"], "bar_met": last["bar_met"], "body": body}


def counters_by_phase(store) -> pd.DataFrame | None:
    """Mean GPU counters in the 10 s buckets where the served requests' prefill share of tokens
    was in its top third (prefill-heavy) and bottom third (decode-heavy); None without both."""
    req = store.requests()
    req = req[req["status"] == "ok"].dropna(subset=["arrival_s", "prompt_tokens", "output_tokens"])
    known = set(store.metrics())
    have = [m for m in COUNTERS if m in known]
    if len(req) < 6 or not have:
        return None
    b = np.floor(req["arrival_s"].to_numpy() / 10.0).astype(np.int64)
    g = req.assign(b=b).groupby("b")[["prompt_tokens", "output_tokens"]].sum()
    share = g["prompt_tokens"] / (g["prompt_tokens"] + g["output_tokens"])
    if share.nunique() < 2:
        return None
    lo, hi = share.quantile([1 / 3, 2 / 3])
    phases = {"prefill-heavy": share.index[share >= hi], "decode-heavy": share.index[share <= lo]}
    rows = []
    for metric in have:
        s = store.samples(metric, b.min() * 10.0, (b.max() + 1) * 10.0)
        if s.empty:
            continue
        sb = np.floor(s["ts_s"].to_numpy() / 10.0).astype(np.int64)
        row = {"metric": metric}
        for name, idx in phases.items():
            vals = s["value"].to_numpy()[np.isin(sb, idx)]
            row[name] = float(np.nanmean(vals)) if len(vals) else np.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    return df if len(df) and df[["prefill-heavy", "decode-heavy"]].notna().any().any() else None


def counters_by_phase_from_source(src, start_s: float, end_s: float,
                                   bucket_s: float = 60.0) -> pd.DataFrame | None:
    """The same from Prometheus: the engines' prefill share per bucket (their token counters)
    and the fleet's mean GPU counters in the top and bottom thirds of it."""
    from gpuprobe.sources.prom_mix import bucket_mix
    bucket_s = min(bucket_s, max((end_s - start_s) / 6, 1.0))
    mix = bucket_mix(src.api, start_s, end_s, bucket_s)
    share = pd.Series(mix["prefill_token_share"].to_numpy(), index=mix["ts_s"].to_numpy()).dropna()
    if share.nunique() < 2:
        return None
    lo, hi = share.quantile([1 / 3, 2 / 3])
    rows = []
    for metric in COUNTERS:
        d = src.downsample(metric, start_s, end_s, max_points=max(1, round((end_s - start_s) / bucket_s)))
        if d.empty:
            continue
        k = np.floor((d["ts_s"].to_numpy() - start_s) / bucket_s)
        row = {"metric": metric}
        for name, keep in (("prefill-heavy", share[share >= hi].index), ("decode-heavy", share[share <= lo].index)):
            ks = np.floor((np.asarray(keep) - start_s) / bucket_s)
            vals = d["value_mean"].to_numpy()[np.isin(k, ks)]
            row[name] = float(np.nanmean(vals)) if len(vals) else np.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    return df if len(df) and df[["prefill-heavy", "decode-heavy"]].notna().any().any() else None


def interference(store) -> dict | None:
    """How much longer a decode step runs when a prefill shares it, from the server's steps:
    median step time per decoded sequence, with and without prefill tokens in the step."""
    steps = store.steps()
    if steps.empty:
        return None
    dec = steps[(steps["num_decode_seqs"] > 0)]
    alone = dec[dec["num_prefill_tokens"].fillna(0) == 0]
    mixed = dec[dec["num_prefill_tokens"].fillna(0) > 0]
    if len(alone) < 5 or len(mixed) < 5:
        return None
    a = float(np.median(alone["duration_s"]))
    m = float(np.median(mixed["duration_s"]))
    return {"decode_alone_s": a, "decode_with_prefill_s": m, "slowdown": m / a if a > 0 else np.nan,
            "num_alone": int(len(alone)), "num_mixed": int(len(mixed)),
            "median_prefill_tokens": float(np.median(mixed["num_prefill_tokens"]))}


def _provenance(store, workload: str, wl: pd.DataFrame) -> dict:
    rows = store.workloads()
    row = rows[rows["name"] == workload]
    source = str(row["source"].iloc[0]) if len(row) else ""
    bundled = bundled_trace(workload) is not None or "azure_llm_2023" in source
    return {"host": socket.gethostname(), "store": str(store.path), "gpuprobe_version": __version__,
            "written_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "workload": workload, "requests": int(len(wl)),
            "span_s": float(wl["arrival_s"].max() - wl["arrival_s"].min()),
            "trace_source": source or (bundled_trace(workload).name if bundled_trace(workload) else ""),
            "license": BUNDLED_LICENSE if bundled else "as given by the trace's owner (not a bundled trace)"}
