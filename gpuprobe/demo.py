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


DEVICES = 2  # enough for cross 1P1D beside the one-device layouts


def stage_predict(store, out_dir: Path) -> None:
    from gpuprobe.decide.recommend import recommend
    from gpuprobe.decide.slo import SLO_PRESETS
    from gpuprobe.perf.roofline import roofline_profile

    slo = SLO_PRESETS["chat"]
    t = _stage(f"predict each layout on H200s (Llama-3-8B shapes, roofline): goodput per GPU within the "
               f"chat SLO (TTFT <= {slo.ttft_s:g} s, TBT <= {slo.tbt_s * 1000:.0f} ms, {slo.attain:.0%} of "
               f"requests); the same search and ranking as `gpuprobe recommend --devices {DEVICES}`")
    profile = roofline_profile("llama3-8b", "h200")
    rows = []
    for name in TRACES:
        rec = recommend(store.workload(name), profile, slo, devices=DEVICES, workload_name=name)
        _say(f"  {name}: {rec['decision']}")
        for i, r in enumerate(rec["candidates"]):
            a = r["at_goodput"]
            rows.append({"workload": name, "layout": r["label"], "goodput": r["max_goodput_rps_per_device"],
                         **{k: a.get(k) for k in ("ttft_p99_s", "tbt_p99_s", "slo_attainment")}})
            mark = "  <- best per GPU" if i == 0 else ""
            _say(f"    {r['label']:<26} goodput {r['max_goodput_rps_per_device']:6.2f} req/s/GPU   at it: TTFT p99 "
                 f"{a.get('ttft_p99_s') or float('nan'):7.3f} s   TBT p99 {(a.get('tbt_p99_s') or float('nan')) * 1000:7.1f} ms"
                 f"{mark}")
    import pandas as pd
    html = out_dir / "layouts.html"
    _plot(pd.DataFrame(rows), html)
    _say(f"  plot: {html}  ({time.perf_counter() - t:.1f} s)")


def _plot(table, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("goodput (req/s per GPU)", "TTFT p99 at it (s)",
                                                         "TBT p99 at it (ms)"))
    colors = ("#3b6fb6", "#e07b39", "#4c9a5a")
    for i, (name, part) in enumerate(table.groupby("workload", sort=False)):
        for col, (metric, scale) in enumerate([("goodput", 1), ("ttft_p99_s", 1), ("tbt_p99_s", 1000)], 1):
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
