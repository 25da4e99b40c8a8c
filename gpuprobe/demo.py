"""`make demo`: the main job end to end on the bundled Azure traces, in one store.

Each stage prints what it found. Stages: import both traces -> describe their prefill/decode
mix -> predict every layout for them on an H200 (roofline profile, Llama-3-8B shapes) and plot
the comparison -> serve the tiny reference model here, replay a slice of a trace against it
and show what was measured.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

TRACES = ("azure-code", "azure-conv")  # bundled trace aliases (gpuprobe.workloads.loading)
DEFAULT_STORE = ".demo/gpuprobe.db"  # not $GPUPROBE_STORE: the demo replaces its workloads, so never in yours


def _say(text: str = "") -> None:
    print(text, flush=True)


def _stage(title: str) -> float:
    _say(f"\n== {title}")
    return time.perf_counter()


def stage_import(store) -> None:
    from gpuprobe.workloads.loading import bundled_trace
    from gpuprobe.workloads.pipeline import import_trace
    t = _stage("import the bundled Azure LLM inference traces (2023, CC-BY-4.0)")
    for name in TRACES:
        result = import_trace(store, bundled_trace(name), name, replace=True)
        _say("\n".join("  " + line for line in result.summary.lines()))
    _say(f"  ({time.perf_counter() - t:.1f} s)")


def stage_analyze(store) -> None:
    from gpuprobe.workloads.analyze import analyze
    _stage("prefill/decode mix per 60 s bucket")
    for name in TRACES:
        mix = analyze(store.workload(name), bucket_s=60.0)
        b = mix.buckets
        _say(f"  {name}: prefill share of tokens p10-p90 {b.prefill_token_share.quantile(0.1):.3f}-"
             f"{b.prefill_token_share.quantile(0.9):.3f}, prefill {b.prefill_tokens_per_s.mean():,.0f} tok/s, "
             f"decode {b.decode_tokens_per_s.mean():,.0f} tok/s, {change_points(mix.change_points_s)}")


def change_points(seconds) -> str:
    """'change points at 120, 480 s' (the first six), or 'no change points'."""
    if not seconds:
        return "no change points"
    return f"change points at {', '.join(str(round(x)) for x in seconds[:6])} s"


SLO = (2.0, 0.1)  # TTFT s, per-request mean TBT s
CANDIDATES = [("monolithic", None), ("intra", 0.5), ("intra", 0.7), ("intra", 0.9), ("cross", None)]


def stage_predict(store, out_dir: Path) -> None:
    from gpuprobe.engine.scheduler import SchedulerConfig
    from gpuprobe.perf.metrics import Slo
    from gpuprobe.perf.roofline import roofline_profile
    from gpuprobe.perf.sim_layouts import LayoutConfig
    from gpuprobe.perf.simulator import simulate

    t = _stage(f"predict each layout on one H200 (cross: two), Llama-3-8B shapes, SLO TTFT <= {SLO[0]} s, "
               f"TBT <= {SLO[1] * 1000:.0f} ms")
    kw = dict(max_num_seqs=256, num_blocks=40_000, max_num_batched_tokens=8192)
    config = LayoutConfig(*(SchedulerConfig(role=r, **kw) for r in ("mixed", "prefill", "decode")))
    rows = []
    for name in TRACES:
        wl = store.workload(name)
        for layout, share in CANDIDATES:
            profile = roofline_profile("llama3-8b", "h200", prefill_share=share or 0.5)
            s = simulate(wl, profile, layout, Slo(*SLO), config).summary
            label = layout if share is None else f"intra {share:.0%} prefill"
            rows.append({"workload": name, "layout": label, **{k: s[k] for k in (
                "ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s", "slo_attainment", "goodput_rps_per_device")}})
    import pandas as pd
    table = pd.DataFrame(rows)
    for name, part in table.groupby("workload", sort=False):
        # Best for the hardware bill: requests meeting the SLO per second per GPU (cross uses two).
        best = part.sort_values(["goodput_rps_per_device", "slo_attainment"], ascending=False).iloc[0]
        _say(f"  {name}:")
        for r in part.itertuples():
            mark = "  <- best per GPU" if r.layout == best.layout else ""
            _say(f"    {r.layout:<20} TTFT p50/p99 {r.ttft_p50_s:7.3f} / {r.ttft_p99_s:7.3f} s   TBT p50/p99 "
                 f"{r.tbt_p50_s * 1000:6.1f} / {r.tbt_p99_s * 1000:7.1f} ms   SLO met {r.slo_attainment:6.1%}   "
                 f"goodput {r.goodput_rps_per_device:5.2f} req/s/GPU{mark}")
    html = out_dir / "layouts.html"
    _plot(table, html)
    _say(f"  plot: {html}  ({time.perf_counter() - t:.1f} s)")


def _plot(table, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("SLO attainment", "TTFT p99 (s)", "TBT p99 (ms)"))
    colors = ("#3b6fb6", "#e07b39", "#4c9a5a")
    for i, (name, part) in enumerate(table.groupby("workload", sort=False)):
        for col, (metric, scale) in enumerate([("slo_attainment", 1), ("ttft_p99_s", 1), ("tbt_p99_s", 1000)], 1):
            fig.add_trace(go.Bar(name=name, x=part["layout"], y=part[metric] * scale, legendgroup=name,
                                 marker_color=colors[i % len(colors)], showlegend=col == 1), row=1, col=col)
    fig.update_yaxes(type="log", row=1, col=2)  # latencies span three orders of magnitude
    fig.update_yaxes(type="log", row=1, col=3)
    fig.update_layout(title="Predicted layouts on an H200 (roofline, Llama-3-8B shapes)", barmode="group",
                      height=450, width=1300)
    fig.write_html(path, include_plotlyjs=True)


def stage_measure(store, out_dir: Path) -> None:
    from gpuprobe.server.launch import start_server
    from gpuprobe.workloads.replay import replay

    t = _stage("serve the tiny reference model here and replay 40 requests of azure-conv against it")
    wl = store.workload("azure-conv", limit=40)
    with start_server("tiny", "monolithic", store=str(store.path), log_path=str(out_dir / "serve.log")) as srv:
        result = replay(wl, srv.url, speed=8.0, token_scale=0.05, store=store, workload="azure-conv",
                        progress=False)
    df = result.records
    ok = df[df["status"] == "ok"]
    _say(f"  {len(ok)}/{len(df)} requests ok; client-side TTFT p50 {ok['ttft_s'].median() * 1000:.1f} ms; "
         f"recorded as run {result.run_id} ({time.perf_counter() - t:.1f} s)")


STAGES = [stage_import, stage_analyze, stage_predict, stage_measure]


def run_demo(store_path: str | None) -> int:
    from gpuprobe.store import Store
    path = Path(store_path or DEFAULT_STORE)
    path.parent.mkdir(parents=True, exist_ok=True)
    _say(f"gpuprobe demo: store {path}")
    with Store.open(path) as store:
        for stage in STAGES:
            if stage in (stage_predict, stage_measure):
                stage(store, path.parent)
            else:
                stage(store)
    _say("\ndemo finished")
    sys.stdout.flush()
    return 0
