"""Live: GPU and host counters, request rate, tokens/s, TTFT and TBT on one shared time axis,
layout switches marked on every panel, redrawn every few seconds (reads cached until new data)."""
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.charts import live_figure
from gpuprobe.dashboard.common import cached, local_time, missing, window_points
from gpuprobe.dashboard.fast_chart import plotly_basic_chart

REQUEST_BUCKET_S = 5.0  # narrower request buckets are mostly empty or single requests
WINDOWS = {"15 min": 900.0, "1 h": 3600.0, "6 h": 21600.0, "24 h": 86400.0, "all": None}
REFRESH_S = 5

st.title("Live")
span = cached(queries.span)
if span is None:
    missing("No samples and no requests in the store.",
            "gpuprobe agent --scrape http://127.0.0.1:8000/metrics  (counters) or gpuprobe serve --store STORE")
    st.stop()

inv = cached(queries.inventory)
hosts = sorted(set(inv["host"]))
top = st.columns([2, 2, 3, 1.3])
window = top[0].selectbox("Window (ending at the newest data)", list(WINDOWS), index=1)
host = top[1].selectbox("Host", ["all", *hosts]) if len(hosts) > 1 else None
gpu_devices = sorted(set(inv[inv["source"].isin(["nvml", "gpm"])]["device"]))
devices = top[2].multiselect("GPUs", gpu_devices, default=gpu_devices) if gpu_devices else []
auto = top[3].toggle("Refresh", value=True, help=f"redraw every {REFRESH_S} s")


@st.fragment(run_every=REFRESH_S if auto else None)
def charts() -> None:
    first, last = cached(queries.span)
    start, end, points = window_points((first, last), WINDOWS[window])
    picked = () if set(devices) == set(gpu_devices) else tuple(devices)  # () = all: Overview's cache key
    panels = cached(queries.counter_panels, start, end, points, None if host in (None, "all") else host, picked)
    source, req = cached(queries.request_panels, start, end, max(1, min(points, int((end - start) / REQUEST_BUCKET_S))))
    slo = cached(queries.slo_ms)  # (TTFT, TPOT) targets of the latest recommendation, ms
    if len(req):
        panels += [
            {"title": f"Request rate ({source})", "unit": "req/s",
             "traces": [{"name": "arrivals", "ts_s": req["ts_s"], "value": req["requests_per_s"]}]},
            {"title": f"Prefill and decode tokens/s ({source})", "unit": "tok/s",
             "traces": [{"name": "prefill", "ts_s": req["ts_s"], "value": req["prefill_tokens_per_s"]},
                        {"name": "decode", "ts_s": req["ts_s"], "value": req["decode_tokens_per_s"]}]},
            {"title": f"TTFT ({source})", "unit": "ms", "slo": slo[0],
             "traces": [{"name": "p50", "ts_s": req["ts_s"], "value": req["ttft_p50_s"] * 1e3},
                        {"name": "p99", "ts_s": req["ts_s"], "value": req["ttft_p99_s"] * 1e3}]},
            {"title": f"TBT ({source}; per-request p50 and p99)", "unit": "ms", "slo": slo[1],
             "traces": [{"name": "p50", "ts_s": req["ts_s"], "value": req["tbt_p50_s"] * 1e3},
                        {"name": "p99", "ts_s": req["ts_s"], "value": req["tbt_p99_s"] * 1e3}]}]
    switches = cached(queries.layout_switches, start, end)
    shown = {p.get("metric") for p in panels}
    if not ({"sm_util_pct", "nvml_gpu_busy_pct"} & shown):
        missing("No GPU counters in this window (no NVIDIA GPU where the agent ran, or no agent).",
                "gpuprobe agent  # on the GPU host")
    if not len(req):
        missing("No requests recorded in this window.",
                "gpuprobe replay --workload azure-conv --target http://127.0.0.1:8000")
    if not panels:
        return
    st.caption(f"{len(panels)} panels, {sum(len(t['ts_s']) for p in panels for t in p['traces']):,} points, "
               f"{len(switches)} layout switches; newest data {local_time(last)}"
               + ("; dotted lines: the latest recommendation's SLO" if slo[0] is not None else ""))
    plotly_basic_chart(live_figure(panels, switches, (start, end)), key="live")
    if len(switches):
        with st.expander(f"Layout switches ({len(switches)})"):
            st.dataframe(switches.assign(time=lambda d: d["ts_s"].map(local_time)).drop(columns="ts_s"),
                         hide_index=True)


charts()
