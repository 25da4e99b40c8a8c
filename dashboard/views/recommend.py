"""Recommend: the answer in words (as the CLI and the report say it), the candidates ranked and
drawn against the SLO, what if (SLO, devices, GPU, price), the reasons with their figures,
each engine's plan, Apply on the recorded server, the autopilot's audit log."""
import pandas as pd
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.answer_view import show_answer
from gpuprobe.dashboard.apply import apply, apply_failed, applied_line
from gpuprobe.dashboard.charts import candidates_figure
from gpuprobe.dashboard.common import cached, local_time, missing, store_path
from gpuprobe.dashboard.plans import plans_for
from gpuprobe.dashboard.whatif_view import show_what_if
from gpuprobe.errors import GpuprobeError

plans_cached = st.cache_data(show_spinner="plans ...", max_entries=32)(plans_for)


def _row(rank: int, c: dict) -> dict:
    a = c.get("at_goodput") or {}
    g = c.get("max_goodput_rps_per_device")
    ms = (lambda v: None if v is None or v != v else round(v * 1e3, 1))
    cost = c.get("cost_per_million_output_tokens")
    return {"rank": rank, "candidate": c.get("label") or c.get("layout"), "layout": c.get("layout"),
            "goodput (req/s per device)": "n/a" if g is None else f"{'>= ' if c.get('capped') else ''}{g:.3g}",
            "SLO met at goodput": None if a.get("slo_attainment") is None else f"{a['slo_attainment']:.0%}",
            "TTFT p99 (ms)": ms(a.get("ttft_p99_s")), "TBT p99 (ms)": ms(a.get("tbt_p99_s")),
            "$ per M output tokens": None if cost is None else f"{cost:.3g}"}


def _rounded(x):
    """Evidence for people: floats to 4 significant figures (the store keeps them whole)."""
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return float(f"{x:.4g}") if isinstance(x, float) and x == x else x



st.title("Recommend")
recs, rec = cached(queries.recommendations), None
if recs.empty:
    missing("No recommendation stored.", "gpuprobe recommend --workload azure-conv --profile profile.json")
else:
    labels = {int(r.pk): f"#{r.pk} {r.layout} for {r.workload or '?'} ({local_time(r.created_s, '%Y-%m-%d %H:%M')})"
              for r in recs.itertuples()}
    chosen = st.selectbox("Recommendation", list(labels), format_func=labels.get)
    try:
        info = cached(queries.answer, chosen)
        rec = info["rec"]
    except GpuprobeError as exc:  # a row that cannot be read: one line, the rest of the page stays
        st.error(str(exc))
if rec is not None:
    show_answer(info)
    st.metric("Applied", local_time(rec.applied_s, "%H:%M:%S %Z") if rec.applied_s else "not yet",
              help=f"to {rec.applied_target}" if rec.applied_target else None)

    st.subheader("Candidates, ranked")
    cands = list(rec.candidates)  # best first, as decide.rank stored them
    if not cands:
        st.info("This recommendation stored no candidates.")
    else:
        st.plotly_chart(candidates_figure(cands, rec.label, rec.slo.ttft_s, rec.slo.tpot_s),
                        key="cands", width="stretch")
        st.dataframe(pd.DataFrame([_row(i, c) for i, c in enumerate(cands, 1)]), hide_index=True)
        if any(c.get("capped") for c in cands):
            st.caption(">= : the workload slice was too short to find that candidate's limit, even "
                       "repeated; its goodput is at least this.")

    show_what_if(rec)

    st.subheader("Reasons")
    for r in rec.reasons:
        st.markdown(f"- {r.get('text', r) if isinstance(r, dict) else r}")
    if rec.reasons:
        with st.expander("details: each reason's figures", expanded=False):
            st.json([_rounded(r.get("evidence")) for r in rec.reasons if isinstance(r, dict)])
    else:
        st.info("This recommendation stored no reasons.")

    st.subheader("Plans")
    plans, why = plans_cached(rec)
    if why:
        st.info(why)
    for tab, (engine, text) in zip(st.tabs(list(plans)) if plans else [], plans.items()):
        with tab:
            st.code(text, language="bash")

    st.subheader("Apply to a reference server")
    servers = cached(queries.server_urls)
    with st.form("apply"):
        target = st.text_input("Server URL", value=st.session_state.get(
            "apply_target", servers[0] if servers else "http://127.0.0.1:8000"))
        st.caption("Servers this store recorded, newest first: " + (", ".join(servers) or "none yet"))
        token = st.text_input("Admin token", type="password")
        sure = st.checkbox(f"Yes, switch this server to {rec.label}")
        force = st.checkbox("Take over from its controller, if one holds it (an autopilot "
                            "stops; recorded as a takeover)")
        go = st.form_submit_button("Apply", type="primary")
    if go:
        st.session_state["apply_target"] = target
        if not sure:
            st.warning("Tick the confirmation first: the switch drains the running layout.")
        else:
            try:
                with st.spinner(f"reading {target}'s layout, then switching it if it runs another ..."):
                    result = apply(store_path(), rec.id, target, token, force=force)
            except GpuprobeError as exc:
                st.error(apply_failed(exc))
            else:
                # kept across the rerun that redraws the page with the recommendation marked applied
                st.session_state["applied"] = (rec.id, target, result)
                st.rerun()
    done = st.session_state.get("applied")
    if done and done[0] == rec.id:
        _, where, result = done
        st.success(applied_line(where, result))
        if result.get("took_over"):
            st.warning(f"Took the server over from {result['took_over']}: its lease ended.")
        for note in result.get("kept") or []:
            st.info(f"Not changed by a live switch: {note}")
        with st.expander("details: the server's answer"):
            st.json(result.get("switch") or {})

st.subheader("Autopilot audit log")
dec = cached(queries.decisions)
if dec.empty:
    missing("The autopilot has made no decision.", "gpuprobe autopilot --target http://127.0.0.1:8000")
else:
    dec = dec.assign(time=dec["ts_s"].map(local_time))
    st.dataframe(dec[["time", "target", "current_layout", "chosen_layout", "action", "reason",
                      "predicted", "outcome"]], hide_index=True)

