"""Accuracy: the model's predictions against what validate measured, with the replay spread."""

import pandas as pd
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.common import cached, fmt_pct, local_time, missing

st.title("Accuracy: predicted against measured")
vals = cached(queries.validations)
if vals.empty:
    missing("No validate result stored.", "gpuprobe validate --workload azure-conv --model tiny")
    st.stop()

vals = vals.sort_values("created_s", ascending=False)
labels = {int(r.pk): f"#{r.pk} {local_time(r.created_s, '%Y-%m-%d %H:%M')}, "
          f"{r.workload or '?'} on {r.device or '?'}" for r in vals.itertuples()}
pk = st.selectbox("Validate run", list(labels), format_func=labels.get)
row = vals[vals["pk"] == pk].iloc[0]
body = cached(queries.validation_body, int(pk))
c = st.columns(3)
c[0].metric("Best measured", row["best_measured"] or body.get("best_measured") or "n/a")
c[1].metric("Best predicted", row["best_predicted"] or body.get("best_predicted") or "n/a")
bar = row["bar_met"]
c[2].metric("Accuracy bar met", "n/a" if pd.isna(bar) else ("yes" if bar else "no"))
rows = body.get("rows") or []
if not rows:
    st.warning(f"Validate run #{pk} stored no predicted/measured rows.")
    st.stop()
ranges = body.get("measured_range") or {}
table = pd.DataFrame(rows)


def _spread(r: dict) -> str | None:
    span = (ranges.get(r["layout"]) or {}).get(r["metric"])
    return None if span is None else f"{span[0]:.4g} .. {span[1]:.4g}"


table["replay_spread"] = [_spread(r) for r in rows]
table["rel_error"] = table["rel_error"].map(fmt_pct)
st.dataframe(table, hide_index=True)
from gpuprobe.validate.plot import figure  # noqa: E402 - plotly only on this page

fig = figure(body)
fig.update_layout(width=None, title=None)
st.plotly_chart(fig, key="validate", width="stretch")
for s in body.get("notes") or []:
    st.caption(s)
