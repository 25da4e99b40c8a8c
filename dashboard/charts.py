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
    """Epoch milliseconds shifted to this machine's local time: what a plotly date axis reads
    from plain numbers (plotly draws them as UTC, so the shift makes the axis read local time).
    Timestamps would become object arrays that plotly deep-copies one by one (0.5 s for a
    dozen series)."""
    return (np.asarray(ts_s, dtype=float) + local_offset_s()) * 1e3


def local_offset_s() -> float:
    """Seconds this machine's local time is ahead of UTC (now)."""
    import time
    return float(time.localtime().tm_gmtoff)


def local_zone() -> str:
    import time
    off = local_offset_s()
    return f"{time.strftime('%Z')}, UTC{'+' if off >= 0 else '-'}{int(abs(off)) // 3600:02d}:{int(abs(off)) % 3600 // 60:02d}"


def live_figure(panels: list[dict], switches: pd.DataFrame, x_range: tuple[float, float]) -> go.Figure:
    """One panel per {title, unit, traces: [{name, ts_s, value}]}, stacked on one x axis
    (zooming one zooms all), a red dashed line at every layout switch on every panel.

    Built as one plain dict and validated once: plotly's make_subplots, add_trace and
    add_vline cost about 1 s for twelve panels, most of the page's time."""
    n, gap = len(panels), 0.45 / max(len(panels), 1)  # room for each panel's own time axis
    height = (1.0 - gap * (n - 1)) / n
    layout = {"template": "plotly_white", "height": max(340, 215 * n + 80), "margin": {"l": 60, "r": 20, "t": 40, "b": 30},
              "hovermode": "x unified", "showlegend": False, "annotations": [], "shapes": []}
    data, slo_shapes = [], []
    for row, p in enumerate(panels, 1):
        axis = "" if row == 1 else str(row)
        top = 1.0 - (row - 1) * (height + gap)
        layout[f"yaxis{axis}"] = {"domain": [max(0.0, top - height), min(1.0, top)], "anchor": f"x{axis}", "title": {"text": p["unit"]},
                                  "rangemode": "tozero"}
        layout[f"xaxis{axis}"] = {"anchor": f"y{axis}", "type": "date", "showticklabels": True,
                                  **({"matches": "x"} if row > 1 else {"range": list(to_ms(x_range))})}
        colors = [NAMED_COLORS.get(t["name"], PALETTE[i % len(PALETTE)]) for i, t in enumerate(p["traces"])]
        # each panel's own legend: its series' names in their colors beside its title
        legend = "  ".join(f'<span style="color:{c}">━ {t["name"]}</span>' for c, t in zip(colors, p["traces"]))
        layout["annotations"].append({"text": f"<b>{p['title']}</b> ({p['unit']})  {legend}", "x": 0.0, "xref": "paper",
                                      "xanchor": "left", "y": top, "yref": "paper", "yanchor": "bottom",
                                      "showarrow": False})
        for color, t in zip(colors, p["traces"]):
            data.append({"type": "scatter", "mode": "lines", "x": to_ms(t["ts_s"]), "y": np.asarray(t["value"]),
                         "name": t["name"], "legendgroup": t["name"], "showlegend": False,
                         "line": {"width": 1.4, "color": color}, "xaxis": f"x{axis}", "yaxis": f"y{axis}",
                         "hovertemplate": "%{y:.3g}<extra>" + t["name"] + "</extra>"})
        if p.get("slo") is not None:  # the target this panel is judged against
            slo_shapes.append({"type": "line", "xref": f"x{axis} domain", "x0": 0, "x1": 1, "yref": f"y{axis}",
                               "y0": p["slo"], "y1": p["slo"], "line": {"color": "#444", "dash": "dot", "width": 1.2}})
            layout["annotations"].append({"text": f"SLO {p['slo']:.3g} {p['unit']}", "x": 1, "xref": f"x{axis} domain",
                                          "xanchor": "right", "y": p["slo"], "yref": f"y{axis}", "yanchor": "bottom",
                                          "showarrow": False, "font": {"size": 10, "color": "#444"}})
    if n:
        layout[f"xaxis{'' if n == 1 else n}"]["title"] = {"text": f"local time ({local_zone()})"}
    shapes, notes = switch_marks(switches, n, x_range)
    layout["shapes"], layout["annotations"] = shapes + slo_shapes, layout["annotations"] + notes
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
    fig.update_yaxes(range=[0, 1], title_text="share (0-1)", row=1, col=1)
    fig.update_yaxes(title_text="tokens/s", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title_text="requests/s", rangemode="tozero", row=3, col=1)
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
    from gpuprobe.forecast.bands import band_outline
    rows = rows.sort_values("target_s")
    x = rows["target_s"].to_numpy(dtype=float)
    fig = go.Figure()
    for lo, hi, name, alpha in (("lo95", "hi95", "95% interval", 0.15), ("lo80", "hi80", "80% interval", 0.3)):
        xs, ys = band_outline(x, rows[lo], rows[hi])
        fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", fillcolor=f"rgba(59,111,182,{alpha})",
                                 line={"width": 0}, name=name, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=rows["value"], name="forecast", mode="lines+markers",
                             line={"color": PALETTE[0]}))
    if history is not None and len(history):
        fig.add_trace(go.Scatter(x=history["start_s"], y=history[metric], name="history", mode="lines",
                                 line={"color": "#444"}))
    unit = UNITS.get(metric, "")
    fig.update_xaxes(title_text="seconds from the workload's start" if x.size and x.max() < 1e9
                     else f"local time ({local_zone()})")
    fig.update_yaxes(title_text=f"{metric.replace('_', ' ')} ({unit})" if unit else metric, rangemode="tozero")
    fig.update_layout(title=metric, height=340, margin={"l": 60, "r": 10, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.3})
    return fig


UNITS = {"prefill_tokens_per_s": "tokens/s", "decode_tokens_per_s": "tokens/s", "requests_per_s": "requests/s",
         "prompt_length": "tokens", "output_length": "tokens", "share": "prefill share of tokens, 0-1"}


def candidates_figure(candidates: list[dict], chosen: str, slo_ttft_s: float, slo_tpot_s: float) -> go.Figure:
    """Goodput per device against TTFT p99 and against the time between tokens (p99 of every
    gap) at each candidate's goodput: a point per candidate, the chosen one marked, the SLO's
    targets (TTFT; TPOT, a request's mean gap) as dashed lines."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=("against TTFT p99", "against time between tokens p99"))
    rows = [c for c in candidates if (c.get("max_goodput_rps_per_device") or 0) > 0]
    for col, key, target in ((1, "ttft_p99_s", slo_ttft_s), (2, "tbt_p99_s", slo_tpot_s)):
        for is_chosen in (False, True):
            part = [c for c in rows if (c.get("label") == chosen) == is_chosen]
            x = [((c.get("at_goodput") or {}).get(key) or np.nan) * 1e3 for c in part]
            fig.add_trace(go.Scatter(
                x=x, y=[c["max_goodput_rps_per_device"] for c in part], mode="markers",
                name="chosen" if is_chosen else "other candidates", showlegend=col == 1,
                text=[c.get("label") for c in part], legendgroup=str(is_chosen),
                marker={"size": 16 if is_chosen else 9, "symbol": "star" if is_chosen else "circle",
                        "color": SWITCH_COLOR if is_chosen else PALETTE[0]},
                hovertemplate="%{text}: %{y:.3g} req/s per device at %{x:.0f} ms<extra></extra>"), row=1, col=col)
        fig.add_vline(x=target * 1e3, line={"color": "#444", "dash": "dash"}, row=1, col=col,
                      annotation_text="SLO (TTFT)" if col == 1 else "SLO (TPOT)", annotation_position="top right")
        fig.update_xaxes(title_text=f"{'TTFT' if col == 1 else 'time between tokens'} p99 at goodput (ms)",
                         row=1, col=col)
    fig.update_yaxes(title_text="goodput (req/s per device)", rangemode="tozero", row=1, col=1)
    fig.update_layout(height=380, margin={"l": 60, "r": 10, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": -0.25})
    return fig
