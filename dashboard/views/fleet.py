"""Fleet: the hosts and GPUs a Prometheus scrapes (`gpuprobe dashboard --source
prometheus=URL`), grouped by a label, with their counters over a window. Prometheus being
down or slow is one error here; every other page reads the embedded store and goes on."""
import os
import time

import streamlit as st

from gpuprobe.dashboard.common import missing

SOURCE_ENV = "GPUPROBE_SOURCE"  # `gpuprobe dashboard --source prometheus=URL` sets it
WINDOWS = {"15 min": 900.0, "1 h": 3600.0, "6 h": 21600.0, "24 h": 86400.0}

st.title("Fleet")
spec = os.environ.get(SOURCE_ENV)
if not spec:
    missing("No Prometheus given: this page reads a fleet through one.",
            "gpuprobe dashboard --source prometheus=http://HOST:9090  (see docs/fleet.md)")
    st.stop()


@st.cache_data(ttl=15, show_spinner=False)
def _fleet_view(spec: str, window_s: float, by: str, until_s: float) -> dict:
    """Hosts, groups and SM activity per host over the window; {'error': line} when the
    source cannot answer. until_s is rounded by the caller, so 15 s of reruns share a read."""
    from gpuprobe.errors import GpuprobeError
    from gpuprobe.sources import open_source
    from gpuprobe.sources.fleet import fleet_groups, fleet_hosts
    try:
        src = open_source(spec)
        start = until_s - window_s
        hosts = fleet_hosts(src, start, until_s, by=by)
        sm = src.downsample("sm_util_pct", start, until_s, max_points=300, source="gpm")
    except GpuprobeError as exc:
        return {"error": str(exc)}
    return {"hosts": hosts, "groups": fleet_groups(hosts) if len(hosts) else hosts, "sm": sm,
            "warnings": list(src.api.warnings)}


top = st.columns([2, 2, 4])
window = top[0].selectbox("Window (ending now)", list(WINDOWS), index=0)
by = top[1].text_input("Group by label", value="model",
                       help="model, engine, or a target label such as host_group")
top[2].caption(f"source: `{spec}`")
data = _fleet_view(spec, WINDOWS[window], by.strip() or "model", 15 * (time.time() // 15))
if "error" in data:
    st.error(f"{data['error']}. The other pages read the embedded store and still work.")
    st.stop()
for w in data["warnings"]:
    st.warning(f"Prometheus answered in part: {w}")
hosts = data["hosts"]
if hosts.empty:
    missing("Prometheus has no gpuprobe agent series in this window.",
            "gpuprobe agent --hostname NAME  # on each serving host, scraped by Prometheus (docs/deploy/prometheus.yml)")
    st.stop()
m = st.columns(3)
m[0].metric("Hosts", len(hosts))
m[1].metric("GPUs", int(hosts["num_gpus"].sum()))
m[2].metric("Groups", len(data["groups"]))
st.subheader(f"Groups by {by}")
st.dataframe(data["groups"], hide_index=True)
st.subheader("Hosts (empty cells: the host did not report that series)")
st.dataframe(hosts, hide_index=True)
sm = data["sm"]
if len(sm):
    import plotly.graph_objects as go

    from gpuprobe.dashboard.charts import to_time
    fig = go.Figure([go.Scatter(x=to_time(g["ts_s"]), y=g["value_mean"], name=f"{h} {d}", mode="lines")
                     for (h, d), g in sm.groupby(["host", "device"], sort=True)])
    fig.update_layout(title="SM activity per GPU (%)", height=340, margin=dict(t=40, b=30))
    st.plotly_chart(fig, key="fleet_sm", width="stretch", theme=None)
