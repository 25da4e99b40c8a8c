"""The report's plots (plotly), each from the evidence dict; None where the data is missing."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpuprobe.forecast.bands import band_outline

BLUE, ORANGE, GREEN, GREY = "#3b6fb6", "#e07b39", "#4c9a5a", "#888888"
LAYOUT = dict(template="plotly_white", height=330, margin=dict(l=60, r=20, t=50, b=40),
              font=dict(size=12), legend=dict(orientation="h", y=-0.2))


def mix_figure(ev: dict) -> go.Figure:
    b = ev["mix"]["buckets"]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=b["start_s"] / 60, y=b["prefill_tokens_per_s"], name="prefill tokens/s",
                             line=dict(color=BLUE)))
    fig.add_trace(go.Scatter(x=b["start_s"] / 60, y=b["decode_tokens_per_s"], name="decode tokens/s",
                             line=dict(color=ORANGE)))
    fig.add_trace(go.Scatter(x=b["start_s"] / 60, y=b["prefill_token_share"], name="prefill share",
                             line=dict(color=GREY, dash="dot")), secondary_y=True)
    for cp in ev["mix"]["change_points_s"]:
        fig.add_vline(x=cp / 60, line=dict(color=GREEN, dash="dash"))
    fig.update_layout(title="The prefill/decode mix over the trace (dashed: change points)", **LAYOUT)
    fig.update_xaxes(title="minutes from the first request")
    fig.update_yaxes(title="tokens/s", secondary_y=False)
    fig.update_yaxes(title="prefill share", range=[0, 1], secondary_y=True)
    return fig


def lengths_figure(ev: dict) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("prompt tokens", "output tokens"))
    for i, (key, color) in enumerate((("prompt", BLUE), ("output", ORANGE)), 1):
        v = np.asarray(ev["lengths"][key], dtype=float)
        fig.add_trace(go.Histogram(x=v, nbinsx=40, marker_color=color, showlegend=False), row=1, col=i)
    fig.update_layout(title="Request lengths", **LAYOUT)
    return fig


def options_figure(ev: dict) -> go.Figure | None:
    rec = ev["recommendation"]
    cands = list(rec.candidates) if rec is not None else []
    if not cands:
        return None
    labels = [c.get("label", c.get("layout")) for c in cands]
    goodput = [c.get("max_goodput_rps_per_device") or 0 for c in cands]
    colors = [GREEN if i == 0 else BLUE for i in range(len(cands))]
    fig = go.Figure(go.Bar(y=labels[::-1], x=goodput[::-1], orientation="h", marker_color=colors[::-1]))
    fig.update_layout(title="Goodput per device within the SLO (higher is better; green: recommended)",
                      **{**LAYOUT, "height": max(300, 22 * len(cands) + 100)})
    fig.update_xaxes(title="requests/s per device")
    return fig


def forecast_figure(ev: dict) -> go.Figure | None:
    fc = ev["forecast"]
    if fc is None:
        return None
    rows = fc["rows"]
    metrics = [m for m in ("prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s")
               if m in set(rows["metric"])]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=metrics)
    b = ev["mix"]["buckets"]
    for i, m in enumerate(metrics, 1):
        part = rows[rows["metric"] == m]
        t = part["target_s"] / 60
        hist = b[b["start_s"] < fc["as_of_s"]].tail(60)
        if m in hist:
            fig.add_trace(go.Scatter(x=hist["start_s"] / 60, y=hist[m], line=dict(color=GREY),
                                     name="measured", showlegend=i == 1), row=1, col=i)
        for lo, hi, op in (("lo95", "hi95", 0.15), ("lo80", "hi80", 0.3)):
            xs, ys = band_outline(t, part[lo], part[hi])
            fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", fillcolor=f"rgba(59,111,182,{op})",
                                     line=dict(width=0), name=f"{lo[2:]}% interval", showlegend=i == 1),
                          row=1, col=i)
        fig.add_trace(go.Scatter(x=t, y=part["value"], line=dict(color=BLUE), name="forecast",
                                 showlegend=i == 1), row=1, col=i)
    fig.update_xaxes(title_text="minutes from the workload's start")
    fig.update_yaxes(title_text="per second", rangemode="tozero")
    fig.update_layout(title=f"Forecast from minute {fc['as_of_s'] / 60:.1f}", **LAYOUT)
    return fig


def validate_figure(ev: dict) -> go.Figure | None:
    v = ev["validation"]
    rows = [r for r in (v or {}).get("body", {}).get("rows") or [] if str(r.get("metric", "")).endswith("_p50_s")]
    if not rows:
        return None
    x = [f"{r['layout']} {r['metric'].removesuffix('_s')}" for r in rows]
    fig = go.Figure([go.Bar(x=x, y=[r.get("measured") for r in rows], name="measured", marker_color=GREY),
                     go.Bar(x=x, y=[r.get("predicted") for r in rows], name="predicted", marker_color=BLUE)])
    fig.update_layout(title="Predicted against measured (last validate run, p50s)", barmode="group", **LAYOUT)
    fig.update_yaxes(title="seconds", type="log")
    return fig


def all_figures(ev: dict) -> dict[str, go.Figure]:
    figs = {"mix": mix_figure(ev), "lengths": lengths_figure(ev), "options": options_figure(ev),
            "forecast": forecast_figure(ev), "validate": validate_figure(ev)}
    return {k: f for k, f in figs.items() if f is not None}
