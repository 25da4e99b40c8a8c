"""Recommend: candidates ranked with their predicted metrics and reasons, the plans for each
engine, Apply on a reference server (confirmation and admin token), the autopilot's audit log."""
import json
import time

import pandas as pd
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.apply import apply
from gpuprobe.dashboard.common import cached, fmt_pct, missing, store_path
from gpuprobe.dashboard.plans import plans_for
from gpuprobe.errors import GpuprobeError

plans_cached = st.cache_data(show_spinner="plans ...", max_entries=32)(plans_for)

CANDIDATE_COLUMNS = ["layout", "params", "max_goodput_rps_per_device", "slo_attainment", "ttft_p50_s",
                     "ttft_p99_s", "tbt_p50_s", "tbt_p99_s"]

st.title("Recommend")
recs, rec = cached(queries.recommendations), None
if recs.empty:
    missing("No recommendation stored.", "gpuprobe recommend --workload azure-conv --profile profile.json")
else:
    labels = {int(r.pk): f"#{r.pk} {r.layout} for {r.workload or '?'} "
              f"({time.strftime('%Y-%m-%d %H:%M', time.gmtime(r.created_s))} UTC)" for r in recs.itertuples()}
    chosen = st.selectbox("Recommendation", list(labels), format_func=labels.get)
    try:
        rec = cached(queries.recommendation, chosen)
    except GpuprobeError as exc:  # a row that cannot be read: one line, the rest of the page stays
        st.error(str(exc))
if rec is not None:
    d = rec.deployment
    share = f" with {d.prefill_share:.0%} of the device for prefill" if d.layout == "intra" else ""
    st.markdown(f"### Run **{rec.label}**" + (f" on {d.devices} device(s)" if d.devices > 1 else ""))
    c = st.columns(4)
    gp = rec.max_goodput_rps_per_device
    c[0].metric("Goodput per device", f"{gp:.2f} req/s" if gp is not None else "n/a")
    c[1].metric("Margin over the runner-up", fmt_pct(rec.margin))
    c[2].metric("Confidence", rec.confidence.word or fmt_pct(rec.confidence.value))
    c[3].metric("Applied", time.strftime("%H:%M:%S UTC", time.gmtime(rec.applied_s))
                if rec.applied_s else "not yet")

    st.subheader("Candidates, ranked")
    cands = pd.DataFrame(list(rec.candidates))
    if cands.empty:
        st.info("This recommendation stored no candidates.")
    else:  # stored best first by decide.rank (goodput, then p99 TBT, then the simpler layout)
        cands.insert(0, "rank", range(1, len(cands) + 1))
        if "params" in cands:
            cands["params"] = cands["params"].map(lambda p: json.dumps(p) if isinstance(p, dict) else p)
        st.dataframe(cands[["rank", *[c for c in CANDIDATE_COLUMNS if c in cands]]], hide_index=True)

    st.subheader("Reasons")
    for r in rec.reasons:
        st.markdown(f"- {r.get('text', r) if isinstance(r, dict) else r}")
        if isinstance(r, dict) and r.get("evidence"):
            with st.expander("evidence", expanded=False):
                st.json(r["evidence"])
    if not rec.reasons:
        st.info("This recommendation stored no reasons.")

    st.subheader("Plans")
    plans, why = plans_cached(rec)
    if why:
        st.info(why)
    for tab, (engine, text) in zip(st.tabs(list(plans)) if plans else [], plans.items()):
        with tab:
            st.code(text, language="bash")

    st.subheader("Apply to a reference server")
    with st.form("apply"):
        target = st.text_input("Server URL", value=st.session_state.get("apply_target", "http://127.0.0.1:8000"))
        token = st.text_input("Admin token", type="password")
        sure = st.checkbox(f"Yes, switch this server to {d.layout}{share}")
        force = st.checkbox("Take over from its controller, if one holds it (an autopilot "
                            "stops; recorded as a takeover)")
        go = st.form_submit_button("Apply", type="primary")
    if go:
        st.session_state["apply_target"] = target
        if not sure:
            st.warning("Tick the confirmation first: the switch drains the running layout.")
        else:
            try:
                with st.spinner(f"switching {target} to {d.layout} ..."):
                    result = apply(store_path(), rec.id, target, token, force=force)
            except GpuprobeError as exc:
                st.error(f"Not applied: {exc}. Nothing was changed.")
            else:
                # kept across the rerun that redraws the page with the recommendation marked applied
                st.session_state["applied"] = (rec.id, target, result)
                st.rerun()
    done = st.session_state.get("applied")
    if done and done[0] == rec.id:
        _, where, result = done
        st.success(f"Applied: {where} now runs **{result.get('layout')}**"
                   + (f" (prefill share {result['prefill_share']})" if result.get("prefill_share") else ""))
        if result.get("took_over"):
            st.warning(f"Took the server over from {result['took_over']}: its lease ended.")
        for note in result.get("kept") or []:
            st.info(f"Not changed by a live switch: {note}")
        with st.expander("the server's answer"):
            st.json(result.get("switch") or {})

st.subheader("Autopilot audit log")
dec = cached(queries.decisions)
if dec.empty:
    missing("The autopilot has made no decision.", "gpuprobe autopilot --target http://127.0.0.1:8000")
else:
    dec = dec.assign(time=dec["ts_s"].map(lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))))
    st.dataframe(dec[["time", "target", "current_layout", "chosen_layout", "action", "reason",
                      "predicted", "outcome"]], hide_index=True)
