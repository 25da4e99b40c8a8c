"""Forecast: each series with its 80% and 95% intervals, the chosen model, the backtest."""
import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.charts import forecast_figure
from gpuprobe.dashboard.common import cached, local_time, missing
from gpuprobe.forecast.persist import note_backtest, note_text

st.title("Forecast")
ids = cached(queries.forecast_ids)
if ids.empty:
    missing("No forecast stored.", "gpuprobe forecast --workload azure-conv --bucket 10s --horizon 60s")
    st.stop()

labels = {i: f"{r.forecast_id or 'forecast'} ({r.workload or 'live'}, {local_time(r.created_s, '%Y-%m-%d %H:%M')})"
          for i, r in enumerate(ids.itertuples())}
pick = ids.iloc[st.selectbox("Forecast", list(labels), format_func=labels.get)]
rows = cached(queries.forecast, pick["forecast_id"], None if pick["forecast_id"] else float(pick["created_s"]))
bucket_s = pick["bucket_s"]
st.caption(f"as of {pick['as_of_s']:,.0f} s, bucket {bucket_s or float('nan'):g} s, horizon "
           f"{pick['horizon_s'] or float('nan'):g} s" if pick["as_of_s"] is not None else "")

history = None
wl = pick["workload"]
if wl and bucket_s and wl in set(cached(queries.workloads)["name"]):
    mix = cached(queries.workload_mix, wl, float(bucket_s))
    if mix is not None and pick["as_of_s"] is not None:
        b = mix["buckets"]
        history = b[b["start_s"] < pick["as_of_s"]].tail(120)  # the stretch just before the forecast

models = (rows.assign(note=rows["note"].map(note_text)).groupby("metric")
          .agg(model=("model", "first"), note=("note", "first"), buckets=("target_s", "count")).reset_index())
st.subheader("Chosen model per series")
st.dataframe(models, hide_index=True)
for metric, part in rows.groupby("metric", sort=False):
    hist = history if history is not None and metric in history.columns else None
    st.plotly_chart(forecast_figure(part, hist, metric), key=f"fc-{metric}", width="stretch")

backtest = [row for note in rows["note"].dropna().unique() for row in note_backtest(note)]
st.subheader("Backtest")
if backtest:  # every candidate per series, the chosen one marked (as `gpuprobe forecast` prints it)
    st.dataframe(backtest, hide_index=True)
else:
    missing("This forecast stored no backtest table; the command prints it.",
            f"gpuprobe forecast --workload {wl or 'NAME'} --json")
