"""Plotly figures from the queries' plain data (no Streamlit): the Live page's panels on one
shared time axis with the layout switches marked on every panel, the workload's mix, the
forecast with its intervals."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SWITCH_COLOR = "#b3261e"
# Request panels' series keep one color wherever they appear; GPUs take PALETTE in device order.
NAMED_COLORS = {"arrivals": "#6c757d", "prefill": "#e07b39", "decode": "#4c9a5a", "p50": "#3b6fb6",
                "p99": "#b3261e"}
PALETTE = ("#3b6fb6", "#e07b39", "#4c9a5a", "#8e5ea2", "#c9a227", "#2a9d8f", "#d1495b", "#6c757d")


def to_time(ts_s) -> pd.DatetimeIndex:
    return pd.to_datetime(np.asarray(ts_s, dtype=float), unit="s", utc=True)


def to_ms(ts_s) -> np.ndarray:
    """Epoch milliseconds: what a plotly date axis reads from plain numbers. Timestamps would
    become object arrays that plotly deep-copies one by one (0.5 s for a dozen series)."""
    return np.asarray(ts_s, dtype=float) * 1e3


def live_figure(panels: list[dict], switches: pd.DataFrame, x_range: tuple[float, float]) -> go.Figure:
    """One panel per {title, unit, traces: [{name, ts_s, value}]}, stacked on one x axis
    (zooming one zooms all), a red dashed line at every layout switch on every panel.

    Built as one plain dict and validated once: plotly's make_subplots, add_trace and
    add_vline cost about 1 s for twelve panels, most of the page's time."""
    n, gap = len(panels), 0.3 / max(len(panels), 1)
    height = (1.0 - gap * (n - 1)) / n
    layout = {"template": "plotly_white", "height": max(320, 190 * n + 80), "margin": {"l": 60, "r": 20, "t": 60, "b": 30},
              "hovermode": "x unified", "legend": {"orientation": "h", "y": 1.0, "yanchor": "top",
                                                   "x": 0, "yref": "container"}, "annotations": [],
              "shapes": []}
    data, seen = [], set()
    for row, p in enumerate(panels, 1):
        axis = "" if row == 1 else str(row)
        top = 1.0 - (row - 1) * (height + gap)
        layout[f"yaxis{axis}"] = {"domain": [max(0.0, top - height), min(1.0, top)], "anchor": f"x{axis}", "title": {"text": p["unit"]},
                                  "rangemode": "tozero"}
        layout[f"xaxis{axis}"] = {"anchor": f"y{axis}", "type": "date", "showticklabels": row == n,
                                  **({"matches": "x"} if row > 1 else {"range": list(to_ms(x_range))})}
        layout["annotations"].append({"text": f"<b>{p['title']}</b> ({p['unit']})", "x": 0.5, "xref": "paper",
                                      "xanchor": "center", "y": top, "yref": "paper", "yanchor": "bottom",
                                      "showarrow": False})
        for i, t in enumerate(p["traces"]):
            color = NAMED_COLORS.get(t["name"], PALETTE[i % len(PALETTE)])
            data.append({"type": "scatter", "mode": "lines", "x": to_ms(t["ts_s"]), "y": np.asarray(t["value"]),
                         "name": t["name"], "legendgroup": t["name"], "showlegend": t["name"] not in seen,
                         "line": {"width": 1.4, "color": color}, "xaxis": f"x{axis}", "yaxis": f"y{axis}",
                         "hovertemplate": "%{y:.3g}<extra>" + t["name"] + "</extra>"})
            seen.add(t["name"])
    shapes, notes = switch_marks(switches, n, x_range)
    layout["shapes"], layout["annotations"] = shapes, layout["annotations"] + notes
    # Not validated: these keys are fixed above and checked by the tests; validating 50 traces
    # of 2,000 points costs 0.3 s on every redraw.
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def switch_marks(switches: pd.DataFrame, rows: int, x_range: tuple[float, float]) -> tuple[list[dict], list[dict]]:
    """(shapes, annotations): a dashed vertical line per layout switch on each of `rows`
    panels, labelled on the top one (on the side away from the plot's edge)."""
    shapes, notes = [], []
    middle = (x_range[0] + x_range[1]) / 2
    for r in switches.itertuples():
        # a server's first layout has no from_layout (NaN in the frame, and NaN is truthy)
        text = f"{r.from_layout} -> {r.to_layout}" if isinstance(r.from_layout, str) and r.from_layout else f"start: {r.to_layout}"
        x = float(to_ms(r.ts_s))
        for row in range(1, rows + 1):
            axis = "" if row == 1 else str(row)
            shapes.append({"type": "line", "xref": f"x{axis}", "yref": f"y{axis} domain", "x0": x, "x1": x,
                           "y0": 0, "y1": 1, "line": {"color": SWITCH_COLOR, "dash": "dash", "width": 1.5}})
        notes.append({"x": x, "xref": "x", "y": 1, "yref": "y domain", "showarrow": False, "yanchor": "top",
                      "xanchor": "left" if r.ts_s < middle else "right", "text": f" {text} ",
                      "font": {"color": SWITCH_COLOR}})
    return shapes, notes


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
