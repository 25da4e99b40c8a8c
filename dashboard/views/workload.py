"""Workload: the phase mix over time with its change points, prompt and output length
distributions and arrivals; two workloads side by side."""
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.charts import PALETTE, hist_figure, mix_figure
from gpuprobe.dashboard.common import cached, missing

st.title("Workload")
wls = cached(queries.workloads)
if wls.empty:
    missing("No workloads in the store.",
            "gpuprobe import gpuprobe/data/azure_llm_2023_conv.csv --name azure-conv")
    st.stop()

names = list(wls["name"])
bucket_s = st.select_slider("Bucket", [1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0], value=60.0,
                            format_func=lambda s: f"{s:g} s")
cols = st.columns(2)
for i, col in enumerate(cols):
    with col:
        name = st.selectbox(f"Workload {i + 1}", names, index=min(i, len(names) - 1), key=f"wl{i}")
        mix = cached(queries.workload_mix, name, bucket_s)
        if mix is None:
            missing(f"Workload {name!r} has no requests.",
                    f"gpuprobe import TRACE --name {name} --replace  (or gpuprobe synth --name {name} ...)")
            continue
        s = mix["summary"]
        m = st.columns(3)
        m[0].metric("Requests", f"{mix['num_requests']:,}")
        m[1].metric("Span", f"{mix['span_s']:,.0f} s")
        ratio = s.get("prompt_output_ratio")
        m[2].metric("Prompt:output tokens", f"{ratio:.1f}" if isinstance(ratio, (int, float)) else "n/a")
        cps = mix["change_points_s"]
        st.caption(f"change points of the prefill share: {', '.join(f'{c:,.0f} s' for c in cps[:8]) or 'none'}")
        st.plotly_chart(mix_figure(mix["buckets"], cps, f"{name}: mix per {bucket_s:g} s"),
                        key=f"mix{i}", width="stretch")
        st.plotly_chart(hist_figure(mix["prompt_hist"], "Prompt length", PALETTE[1]), key=f"ph{i}",
                        width="stretch")
        st.plotly_chart(hist_figure(mix["output_hist"], "Output length", PALETTE[2]), key=f"oh{i}",
                        width="stretch")
