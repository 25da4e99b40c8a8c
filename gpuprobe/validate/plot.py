"""validate's result as a plot: predicted against measured per layout, one panel per metric,
each measured bar with its range over the replays. The only module here that imports plotly."""
from __future__ import annotations

PANELS = (("ttft_p50_s", "TTFT p50 (ms)", 1e3), ("tbt_p50_s", "TBT p50 (ms)", 1e3),
          ("throughput_tok_s", "throughput (tok/s)", 1.0), ("ttft_p99_s", "TTFT p99 (ms)", 1e3),
          ("tbt_p99_s", "TBT p99 (ms)", 1e3))


def figure(out: dict):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = {(r["layout"], r["metric"]): r for r in out["rows"]}
    layouts = list(dict.fromkeys(r["layout"] for r in out["rows"]))
    ranges = out.get("measured_range", {})
    errors = {layout: s.get("median_abs_rel_error_p50") for layout, s in out.get("summary", {}).items()}
    fig = make_subplots(rows=1, cols=len(PANELS), subplot_titles=[t for _, t, _ in PANELS])
    for col, (metric, _, scale) in enumerate(PANELS, 1):
        pred = [_num(rows.get((x, metric), {}).get("predicted")) * scale for x in layouts]
        meas = [_num(rows.get((x, metric), {}).get("measured")) * scale for x in layouts]
        lo, hi = [], []
        for x, m in zip(layouts, meas):
            span = ranges.get(x, {}).get(metric)
            lo.append(m - span[0] * scale if span else 0.0)
            hi.append(span[1] * scale - m if span else 0.0)
        fig.add_trace(go.Bar(name="predicted", x=layouts, y=pred, marker_color="#3b6fb6",
                             legendgroup="predicted", showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Bar(name="measured (median; bar: range over replays)", x=layouts, y=meas,
                             marker_color="#e07b39", legendgroup="measured", showlegend=col == 1,
                             error_y={"type": "data", "symmetric": False, "array": hi,
                                      "arrayminus": lo}), row=1, col=col)
        seen = [v for v in pred + meas if v == v and v > 0]
        if seen and max(seen) > 10 * min(seen):  # a layout 10x off the others: log scale
            fig.update_yaxes(type="log", row=1, col=col)
    shown = ", ".join(f"{x} {e:.0%}" for x, e in errors.items() if e is not None)
    fig.update_layout(barmode="group", height=430, width=1500,
                      title=f"gpuprobe validate: predicted against measured. Median p50 error: "
                            f"{shown}. Best measured {out.get('best_measured')}, predicted "
                            f"{out.get('best_predicted')}")
    return fig


def write_plot(out: dict, path: str) -> None:
    figure(out).write_html(path, include_plotlyjs=True)


def _num(v) -> float:
    return float("nan") if v is None else float(v)
