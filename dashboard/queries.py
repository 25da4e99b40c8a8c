"""The pages' reads: store -> plain data (DataFrames, dicts), no Streamlit, so each is cached by
`common.cached` and tested on its own. Every time series is downsampled in the store (at most
`max_points` buckets a series). Each function holds the store for its reads (`Store.reading`):
one read-only connection serves every browser session's thread.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from gpuprobe.decide.recommendation import Recommendation, latest_recommendation, load_recommendation
from gpuprobe.errors import UserError
from gpuprobe.perf.metrics import Slo
from gpuprobe.store import reads

# (metric, source or None, title, scale, unit): the Live page's counter panels, in order.
GPU_PANELS = (("sm_util_pct", "gpm", "SM activity", 1.0, "%"),
              ("sm_occupancy_pct", "gpm", "SM occupancy", 1.0, "%"),
              ("dram_bw_util_pct", "gpm", "DRAM bandwidth", 1.0, "% of peak"),
              ("tensor_util_pct", "gpm", "Tensor activity", 1.0, "%"),
              ("nvml_gpu_busy_pct", "nvml", "GPU busy (NVML)", 1.0, "%"),
              ("mem_used_bytes", "nvml", "GPU memory used", 2.0 ** -30, "GiB"),
              ("power_w", "nvml", "Power", 1.0, "W"))
HOST_PANELS = (("cpu_util_pct", "host", "Host CPU", 1.0, "%"),
               ("mem_used_bytes", "host", "Host memory used", 2.0 ** -30, "GiB"))
ENGINE_PANELS = (("num_requests_running", "engine", "Engine: requests running", 1.0, "requests"),
                 ("prompt_tokens_per_s", "engine", "Engine: prefill tokens/s", 1.0, "tok/s"),
                 ("generation_tokens_per_s", "engine", "Engine: decode tokens/s", 1.0, "tok/s"),
                 ("ttft_p99_s", "engine", "Engine: TTFT p99", 1e3, "ms"),
                 ("itl_p99_s", "engine", "Engine: TBT (ITL) p99", 1e3, "ms"))
ALERT_KINDS = ("gpu_lost", "samples_dropped")
DEFAULT_TBT_SLO_S = Slo().tpot_s  # the alert's target when no recommendation names one


def _locked(fn):
    def run(store, *args):
        with store.reading():
            return fn(store, *args)
    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


@_locked
def span(store) -> tuple[float, float] | None:
    """(first, last) time of any sample, request or layout switch, seconds since the epoch
    (a switch after the last request still ends the window)."""
    parts = [p for p in (reads.sample_span(store), reads.request_span(store), reads.layout_span(store)) if p]
    return (min(p[0] for p in parts), max(p[1] for p in parts)) if parts else None


@_locked
def inventory(store) -> pd.DataFrame:
    return reads.inventory(store)


@_locked
def counter_panels(store, start_s: float, end_s: float, max_points: int, host: str | None,
                   devices: tuple) -> list[dict]:
    """The counter panels with data in the window: {title, unit, traces: [{name, ts_s, value}]}.
    GPU panels keep only `devices` (all when empty)."""
    out = []
    for metric, source, title, scale, unit in GPU_PANELS + HOST_PANELS + ENGINE_PANELS:
        df = store.downsample(metric, start_s, end_s, max_points, host=host, source=source)
        if source in ("nvml", "gpm") and devices:
            df = df[df["device"].isin(devices)]
        if df.empty:
            continue
        several = df["host"].nunique() > 1
        traces = [{"name": f"{h} {d}" if several else str(d), "ts_s": g["ts_s"].to_numpy(),
                   "value": g["value_mean"].to_numpy(dtype=float) * scale}
                  for (h, d), g in df.groupby(["host", "device"], sort=True)]
        out.append({"metric": metric, "source": source, "title": title, "unit": unit, "traces": traces})
    return out


@_locked
def request_panels(store, start_s: float, end_s: float, max_points: int) -> tuple[str | None, pd.DataFrame]:
    """(source, buckets) of the requests recorded in the window: the server's own rows when
    there are any (a replay through the same server would count each request twice)."""
    src = reads.request_sources(store)
    for source in ("server", "tap", "replay", *src["source"]):
        if source in set(src["source"]):
            df = reads.request_buckets(store, start_s, end_s, max_points, source)
            if len(df):
                return source, df
    return None, pd.DataFrame(columns=reads.REQUEST_BUCKET_COLUMNS)


@_locked
def layout_switches(store, start_s: float | None = None, end_s: float | None = None) -> pd.DataFrame:
    ev = store.layout_events(since_s=start_s)
    if end_s is not None:
        ev = ev[ev["ts_s"] <= end_s]
    return ev[["ts_s", "host", "from_layout", "to_layout", "prefill_share", "actor", "reason", "status"]]


@_locked
def overview(store) -> dict:
    """Hosts, GPUs, engines, the current layout, the latest recommendation, counts."""
    inv = reads.inventory(store)
    gpus = inv[inv["source"].isin(["nvml", "gpm"])][["host", "device"]].drop_duplicates()
    runs = store.runs()
    serves = runs[runs["kind"] == "serve"]
    engines = sorted({*inv[inv["source"] == "engine"]["device"]})
    hosts = sorted({*inv["host"], *serves["host"]} - {""})
    current = _current_layout(store)
    if current is None and len(serves):
        meta = json.loads(serves.iloc[-1]["meta"] or "{}")
        if meta.get("layout"):
            current = {"layout": meta["layout"], "prefill_share": _num(meta.get("prefill_share")),
                       "since_s": float(serves.iloc[-1]["started_s"]), "actor": "serve"}
    try:
        latest, unreadable = latest_recommendation(store), None
    except UserError as exc:  # a row written by hand: the page says so instead of failing
        latest, unreadable = None, str(exc)
    counts = reads.table_counts(store, ("requests", "steps", "workloads", "recommendations", "forecasts",
                                        "validations", "decisions"))
    return {"hosts": hosts, "gpus": gpus.reset_index(drop=True), "engines": engines,
            "serve_runs": serves[["run_id", "host", "started_s", "ended_s", "meta"]].reset_index(drop=True),
            "current": current, "recommendation": latest, "recommendation_error": unreadable,
            "counts": counts,
            "num_series": int(inv["num_metrics"].sum()) if len(inv) else 0}


@_locked
def alerts(store, tbt_slo_s: float | None = None, window_s: float = 300.0) -> list[dict]:
    """{level, kind, ts_s, text}: a GPU lost, the agent dropping samples (stored events), and
    the TBT SLO at risk: the 90th percentile of per-request median TBT over the newest
    `window_s` of served requests at 80% or more of the target."""
    out = []
    for r in reads.latest_events(store, ALERT_KINDS, limit=20).itertuples():
        out.append({"level": "error" if r.kind == "gpu_lost" else "warning", "kind": r.kind,
                    "ts_s": float(r.ts_s), "text": f"{r.host}: {r.message}"})
    target = tbt_slo_s or DEFAULT_TBT_SLO_S
    req_span = reads.request_span(store)
    if req_span:
        tbt = reads.request_tbt_p50s(store, req_span[1] - window_s)
        if len(tbt) and (p90 := float(np.quantile(tbt, 0.9))) >= 0.8 * target:
            level = "error" if p90 > target else "warning"
            out.append({"level": level, "kind": "tbt_slo", "ts_s": req_span[1],
                        "text": f"TBT SLO at risk: p90 of per-request TBT over the last {window_s:.0f} s "
                                f"of requests is {p90 * 1e3:.1f} ms against a target of {target * 1e3:.0f} ms"})
    return out


def _current_layout(store) -> dict | None:
    """What the server runs by its newest successful layout event: {layout, prefill_share,
    chunked_prefill_tokens, since_s, actor}, or None."""
    ev = store.layout_events()
    ok = ev[ev["status"] == "ok"]
    if not len(ok):
        return None
    last = ok.iloc[-1]
    try:
        detail = json.loads(last["detail"] or "{}") if isinstance(last["detail"], str) else {}
    except ValueError:
        detail = {}
    return {"layout": last["to_layout"], "prefill_share": _num(last["prefill_share"]),
            "chunked_prefill_tokens": detail.get("chunked_prefill_tokens"),
            "since_s": float(last["ts_s"]), "actor": last["actor"]}


@_locked
def answer(store, rec_id: int) -> dict:
    """The recommendation `rec_id` in words (gpuprobe.decide.answer, with the last validate
    on its workload), and the drift warning when the server no longer runs it after Apply:
    {rec, answer, drift}."""
    from gpuprobe.decide.answer import answer as words
    from gpuprobe.decide.validate_evidence import last_validation
    from gpuprobe.deploy.drift import drift_warning
    rec = load_recommendation(store, rec_id)
    return {"rec": rec, "answer": words(rec, last_validation(store, rec.workload_name)),
            "drift": drift_warning(rec, _current_layout(store))}


@_locked
def server_urls(store) -> list[str]:
    """The URLs of the servers this store has recorded, newest first: where recommendations
    were applied, what profile and replay targeted, what the agent scraped."""
    seen: list[tuple[float, str]] = []
    recs = store.recommendations()
    for r in recs.itertuples():
        if isinstance(getattr(r, "applied_target", None), str):
            t = _num(r.applied_s)
            seen.append((t if t is not None else float(r.created_s), r.applied_target))
    for r in reads.profiles(store).itertuples():
        if isinstance(r.target, str):
            seen.append((float(r.created_s), r.target))
    for r in store.runs().itertuples():
        meta = json.loads(r.meta) if isinstance(r.meta, str) and r.meta else {}
        urls = [meta.get("target")] + [u[:-len("/metrics")] for u in meta.get("scrape") or []
                                        if isinstance(u, str) and u.endswith("/metrics")]
        seen += [(float(r.started_s), u) for u in urls if isinstance(u, str) and u.startswith("http")]
    out: list[str] = []
    for _, url in sorted(seen, reverse=True):
        url = url.rstrip("/")
        if url not in out:
            out.append(url)
    return out


@_locked
def slo_ms(store) -> tuple[float | None, float | None]:
    """(TTFT, TPOT) targets of the latest recommendation in ms, (None, None) without one."""
    try:
        rec = latest_recommendation(store)
    except UserError:
        rec = None
    return (None, None) if rec is None else (rec.slo.ttft_s * 1e3, rec.slo.tpot_s * 1e3)


def slo_tbt_s(rec: Recommendation | None) -> float | None:
    """The TBT target (s) a recommendation was made for."""
    return None if rec is None else rec.slo.tbt_s


@_locked
def workloads(store) -> pd.DataFrame:
    return store.workloads()[["name", "created_s", "source", "format", "num_requests"]]


@_locked
def workload_mix(store, name: str, bucket_s: float) -> dict | None:
    """analyze()'s buckets and change points for one workload, and its length histograms
    (counts over log-spaced edges), or None when it has no requests."""
    from gpuprobe.workloads.analyze import analyze

    wl = store.workload(name)
    if wl.empty:
        return None
    mix = analyze(wl, bucket_s=bucket_s)
    return {"buckets": mix.buckets, "change_points_s": list(mix.change_points_s),
            "summary": {k: v for k, v in mix.summary.items() if isinstance(v, (int, float, str))},
            "prompt_hist": _log_hist(wl["prompt_tokens"]), "output_hist": _log_hist(wl["output_tokens"]),
            "num_requests": len(wl), "span_s": float(wl["arrival_s"].iloc[-1])}


def _log_hist(values: pd.Series, bins: int = 40) -> dict:
    v = values.to_numpy(dtype=float)
    v = v[v > 0]
    if not len(v):
        return {"edges": np.array([0.0, 1.0]), "counts": np.array([0])}
    edges = np.unique(np.geomspace(max(1.0, v.min()), max(2.0, v.max() + 1), bins + 1))
    counts, edges = np.histogram(v, edges)
    return {"edges": edges, "counts": counts}


@_locked
def validations(store) -> pd.DataFrame:
    return store.validations()


@_locked
def validation_body(store, pk: int) -> dict:
    return reads.validation_body(store, pk)


@_locked
def forecast_ids(store) -> pd.DataFrame:
    """One row per stored forecast: forecast_id, workload, created_s, as_of_s, bucket_s,
    horizon_s, metrics, models (newest first)."""
    return reads.forecast_index(store)


@_locked
def forecast(store, forecast_id: str | None, created_s: float | None = None) -> pd.DataFrame:
    """One stored forecast's rows (by id; one stored without an id by its time): never the
    rows of every forecast, which a chart would draw as one zig-zagging band."""
    from gpuprobe.forecast.bands import one_forecast
    rows = store.forecasts(forecast_id=forecast_id)
    return one_forecast(rows, forecast_id, created_s)


@_locked
def recommendations(store) -> pd.DataFrame:
    return store.recommendations().sort_values("created_s", ascending=False)


@_locked
def recommendation(store, rec_id: int) -> Recommendation:
    return load_recommendation(store, rec_id)


@_locked
def decisions(store) -> pd.DataFrame:
    return store.decisions().sort_values("ts_s", ascending=False)


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f
