"""`make demo`: the main job end to end on the bundled Azure traces, in one store.

Each stage prints what it found; a stage whose parts are not installed says so and the demo
goes on. Stages: import both traces -> describe their prefill/decode mix.
"""
from __future__ import annotations

import sys
import time
from importlib import resources
from pathlib import Path

TRACES = {"azure-code": "azure_llm_2023_code.csv", "azure-conv": "azure_llm_2023_conv.csv"}


def bundled_trace(file_name: str) -> Path:
    return Path(str(resources.files("gpuprobe") / "data" / file_name))


def _say(text: str = "") -> None:
    print(text, flush=True)


def _stage(title: str) -> float:
    _say(f"\n== {title}")
    return time.perf_counter()


def stage_import(store) -> None:
    from gpuprobe.workloads.pipeline import import_trace
    t = _stage("import the bundled Azure LLM inference traces (2023, CC-BY-4.0)")
    for name, file_name in TRACES.items():
        result = import_trace(store, bundled_trace(file_name), name, replace=True)
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
             f"decode {b.decode_tokens_per_s.mean():,.0f} tok/s, "
             f"change points at {[round(x) for x in mix.change_points_s][:6]} s")


STAGES = [stage_import, stage_analyze]


def run_demo(store_path: str | None) -> int:
    from gpuprobe.store import Store
    path = Path(store_path or ".demo/gpuprobe.db")
    path.parent.mkdir(parents=True, exist_ok=True)
    _say(f"gpuprobe demo: store {path}")
    with Store.open(path) as store:
        for stage in STAGES:
            stage(store)
    _say("\ndemo finished")
    sys.stdout.flush()
    return 0
