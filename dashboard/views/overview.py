"""Overview: hosts, GPUs, serving engine, current layout, the latest recommendation, alerts."""
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.answer_view import show_answer
from gpuprobe.dashboard.charts import live_figure
from gpuprobe.dashboard.common import cached, local_time, missing, window_points
from gpuprobe.dashboard.fast_chart import plotly_basic_chart
from gpuprobe.dashboard.queries import slo_tbt_s

st.title("Overview")
o = cached(queries.overview)
rec = o["recommendation"]
alerts = cached(queries.alerts, slo_tbt_s(rec))

c = st.columns(4)
c[0].metric("Hosts", len(o["hosts"]))
c[1].metric("GPUs", len(o["gpus"]))
c[2].metric("Serving engines", len(o["engines"]) + len(o["serve_runs"]))
cur = o["current"]
c[3].metric("Current layout", cur["layout"] if cur else "unknown",
            help="the last successful layout switch, or the layout the last `gpuprobe serve` started with")

span = cached(queries.span)
if span is not None:  # the last hour at a glance; the same reads as the Live page's default window
    start, end, points = window_points(span, 3600.0)
    panels = cached(queries.counter_panels, start, end, points, None, ())[:1]
    source, req = cached(queries.request_panels, start, end, max(1, min(points, int((end - start) / 5.0))))
    if len(req):
        panels.append({"title": f"Request rate ({source})", "unit": "req/s",
                       "traces": [{"name": "arrivals", "ts_s": req["ts_s"], "value": req["requests_per_s"]}]})
    if panels:
        fig = live_figure(panels, cached(queries.layout_switches, start, end), (start, end))
        fig.update_layout(height=140 + 150 * len(panels))
        st.markdown("**The last hour** (more on the Live page)")
        plotly_basic_chart(fig, key="glance")

st.subheader("Alerts")
if not alerts:
    st.success("No alerts: no GPU lost, no samples dropped, TBT within its SLO.")
for a in alerts:
    (st.error if a["level"] == "error" else st.warning)(f"{local_time(a['ts_s'])}: {a['text']}")

st.subheader("The answer")
if o["recommendation_error"]:
    st.error(o["recommendation_error"])
elif rec is None:
    missing("No recommendation stored yet.", "gpuprobe recommend --workload azure-conv --profile profile.json")
else:
    st.caption(f"Recommendation #{rec.id} for workload {rec.workload_name}"
               + (f", applied to {rec.applied_target}" if rec.applied_s else ", not applied yet"))
    show_answer(cached(queries.answer, rec.id), compact=True)
    st.metric("Applied", "yes" if rec.applied_s else "not yet")

st.subheader("Hosts and GPUs")
if not o["hosts"]:
    missing("Nothing sampled yet.", "gpuprobe agent --scrape http://127.0.0.1:8000/metrics")
else:
    st.write(", ".join(o["hosts"]))
if len(o["gpus"]):
    st.dataframe(o["gpus"], hide_index=True)
elif o["hosts"]:
    missing("No GPU samples (no NVIDIA driver where the agent ran, or it was not run on a GPU host).",
            "gpuprobe agent  # on a host with NVIDIA GPUs")

st.subheader("Serving")
if o["engines"]:
    st.write("Engines scraped by the agent: " + ", ".join(f"`{e}`" for e in o["engines"]))
if len(o["serve_runs"]):
    runs = o["serve_runs"].copy()
    for col in ("started_s", "ended_s"):  # epoch seconds as local times a person reads
        runs[col] = runs[col].map(local_time)
    st.dataframe(runs.rename(columns={"started_s": "started", "ended_s": "ended"}), hide_index=True)
if not o["engines"] and not len(o["serve_runs"]):
    missing("No serving engine seen.", "gpuprobe serve --model tiny --store STORE  (or gpuprobe agent --scrape URL)")
st.caption("Rows: " + ", ".join(f"{k} {v:,}" for k, v in o["counts"].items()))
