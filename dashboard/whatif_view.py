"""The Recommend page's what-if: the SLO, the devices, the GPU and the price as inputs, the
decision again on the same workload slice (gpuprobe.decide.whatif, not stored), its answer
in words and its candidates drawn against the SLO."""
from __future__ import annotations

import streamlit as st

from gpuprobe.dashboard.answer_view import md
from gpuprobe.dashboard.charts import candidates_figure
from gpuprobe.dashboard.common import store, store_path
from gpuprobe.errors import GpuprobeError


@st.cache_data(show_spinner=False, max_entries=16)
def _ask(store_key: str, rec_id: int, inputs) -> tuple:
    """(Recommendation, None) or (None, the one line that says why not), cached per inputs."""
    from gpuprobe.decide.recommendation import load_recommendation
    from gpuprobe.decide.whatif import what_if
    s = store()
    try:
        with s.reading():
            rec = load_recommendation(s, rec_id)
        return what_if(s, rec, inputs), None
    except GpuprobeError as exc:  # no layout meets it, a profile missing: said, not raised
        return None, str(exc)


def show_what_if(rec) -> None:
    from gpuprobe.decide.answer import answer
    from gpuprobe.decide.whatif import MEASURED, WhatIfInputs
    from gpuprobe.perf.roofline import GPUS

    st.subheader("What if")
    with st.form("what-if"):
        c = st.columns(5)
        ttft = c[0].number_input("TTFT target (s)", min_value=0.001, value=float(rec.slo.ttft_s), format="%.3f")
        tbt = c[1].number_input("TPOT target (s)", min_value=0.001, value=float(rec.slo.tpot_s), format="%.3f")
        devices = c[2].number_input("Devices", min_value=1, max_value=64, value=int(rec.max_devices or 1))
        gpu = c[3].selectbox("GPU", [MEASURED, *GPUS], help="measured: the profile the recommendation used; "
                             "a GPU: `gpuprobe profile --spec`'s datasheet profile of the model shape below")
        price = c[4].number_input("Price per device-hour ($, 0: list price)", min_value=0.0, value=0.0)
        shape = st.selectbox("Model shape (for a GPU)", ["llama3-8b", "tiny"])
        go = st.form_submit_button("Ask again")
    if not go and "what_if" not in st.session_state:
        st.caption("Change the inputs and ask again: the same workload slice, searched again, not stored.")
        return
    if go:
        st.session_state["what_if"] = WhatIfInputs(ttft, tbt, int(devices), gpu, shape, price or None)
    inputs = st.session_state["what_if"]
    with st.spinner("searching every candidate's goodput again ..."):
        new, why = _ask(store_path(), rec.id, inputs)
    if new is None:
        st.warning(why)
        return
    st.markdown(md(answer(new).decision))
    st.plotly_chart(candidates_figure(list(new.candidates), new.label, new.slo.ttft_s, new.slo.tpot_s),
                    key="what-if-chart", width="stretch")
