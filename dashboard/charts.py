"""Plotly figures from the queries' plain data (no Streamlit): the Live page's panels on one
shared time axis with the layout switches marked on every panel, the workload's mix, the
forecast with its intervals."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SWITCH_COLOR = "#b3261e"
PALETTE = ("#3b6fb6", "#e07b39", "#4c9a5a", "#8e5ea2", "#c9a227", "#2a9d8f", "#d1495b", "#6c757d")


def to_time(ts_s) -> pd.DatetimeIndex:
    return pd.to_datetime(np.asarray(ts_s, dtype=float), unit="s", utc=True)


def live_figure(panels: list[dict], switches: pd.DataFrame, x_range: tuple[float, float]) -> go.Figure:
    """One subplot per panel {title, unit, traces: [{name, ts_s, value}]}, all on one x axis
    (zooming one zooms all), a red dashed line at every layout switch on every panel."""
    n = len(panels)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=min(0.04, 0.3 / max(n, 1)),
                        subplot_titles=[f"{p['title']} ({p['unit']})" for p in panels])
    for row, p in enumerate(panels, 1):
        for i, t in enumerate(p["traces"]):
            fig.add_trace(go.Scatter(x=to_time(t["ts_s"]), y=t["value"], name=t["name"], mode="lines",
                                     line={"width": 1.4, "color": PALETTE[i % len(PALETTE)]},
                                     legendgroup=p["title"], showlegend=len(p["traces"]) > 1 or row == 1,
                                     hovertemplate="%{y:.3g}<extra>" + t["name"] + "</extra>"),
                          row=row, col=1)
        fig.update_yaxes(title_text=p["unit"], row=row, col=1, rangemode="tozero")
    mark_switches(fig, switches, rows=n)
    fig.update_xaxes(range=list(to_time(x_range)), row=n, col=1)
    fig.update_layout(height=max(320, 190 * n + 80), margin={"l": 60, "r": 20, "t": 40, "b": 30},
                      hovermode="x unified", showlegend=False)
    return fig


def mark_switches(fig: go.Figure, switches: pd.DataFrame, rows: int = 1) -> None:
    """A dashed vertical line per layout switch on each of `rows` panels, labelled once on top."""
    for r in switches.itertuples():
        x = to_time([r.ts_s])[0]
        label = f"{r.from_layout or '?'} -> {r.to_layout}"
        for row in range(1, rows + 1):
            fig.add_vline(x=x, line={"color": SWITCH_COLOR, "dash": "dash", "width": 1.5}, row=row, col=1,
                          annotation_text=label if row == 1 else None, annotation_position="top left",
                          annotation_font_color=SWITCH_COLOR)


def mix_figure(buckets: pd.DataFrame, change_points_s: list, title: str) -> go.Figure:
    """The workload's prefill share of tokens, tokens/s and arrivals per bucket, change points
    marked; x is seconds from the workload's first request."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Prefill share of tokens", "Tokens/s", "Arrivals (requests/s)"))
    x = buckets["start_s"]
    fig.add_trace(go.Scatter(x=x, y=buckets["prefill_token_share"], name="prefill share", mode="lines",
                             line={"color": PALETTE[0]}), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=buckets["prefill_tokens_per_s"], name="prefill tok/s", mode="lines",
                             line={"color": PALETTE[1]}), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=buckets["decode_tokens_per_s"], name="decode tok/s", mode="lines",
                             line={"color": PALETTE[2]}), row=2, col=1)
    fig.add_trace(go.Bar(x=x, y=buckets["requests_per_s"], name="requests/s", marker_color=PALETTE[3]),
                  row=3, col=1)
    for cp in change_points_s:
        for row in (1, 2, 3):
            fig.add_vline(x=cp, line={"color": SWITCH_COLOR, "dash": "dot"}, row=row, col=1)
    fig.update_yaxes(range=[0, 1], row=1, col=1)
    fig.update_xaxes(title_text="seconds from the first request", row=3, col=1)
    fig.update_layout(title=title, height=620, margin={"l": 50, "r": 10, "t": 70, "b": 40},
                      legend={"orientation": "h", "y": -0.12})
    return fig


def hist_figure(hist: dict, title: str, color: str) -> go.Figure:
    edges, counts = hist["edges"], hist["counts"]
    centers = np.sqrt(edges[:-1] * np.maximum(edges[1:], 1e-9))
    fig = go.Figure(go.Bar(x=centers, y=counts, width=np.diff(edges), marker_color=color, name=title))
    fig.update_xaxes(type="log", title_text="tokens")
    fig.update_yaxes(title_text="requests")
    fig.update_layout(title=title, height=300, margin={"l": 50, "r": 10, "t": 50, "b": 40})
    return fig


def forecast_figure(rows: pd.DataFrame, history: pd.DataFrame | None, metric: str) -> go.Figure:
    """One series' forecast: the point forecast, its 80% and 95% bands, and the history before
    it when known (x: seconds from the workload's start, or epoch time for live forecasts)."""
    rows = rows.sort_values("target_s")
    x = rows["target_s"].to_numpy(dtype=float)
    fig = go.Figure()
    for lo, hi, name, alpha in (("lo95", "hi95", "95% interval", 0.15), ("lo80", "hi80", "80% interval", 0.3)):
        lo_v, hi_v = rows[lo].fillna(rows["value"]), rows[hi].fillna(rows["value"])
        fig.add_trace(go.Scatter(x=np.r_[x, x[::-1]], y=np.r_[hi_v, lo_v[::-1]], fill="toself",
                                 fillcolor=f"rgba(59,111,182,{alpha})", line={"width": 0}, name=name,
                                 hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=rows["value"], name="forecast", mode="lines+markers",
                             line={"color": PALETTE[0]}))
    if history is not None and len(history):
        fig.add_trace(go.Scatter(x=history["start_s"], y=history[metric], name="history", mode="lines",
                                 line={"color": "#444"}))
    fig.update_layout(title=metric, height=340, margin={"l": 50, "r": 10, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.2})
    return fig
