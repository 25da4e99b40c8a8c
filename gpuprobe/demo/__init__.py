"""`make demo`: the main job end to end on this machine, in one store.

import the bundled Azure traces -> their prefill/decode mix -> start the reference server
(smollm2-135m, real text) with the agent beside it -> replay a slice of azure-conv scaled to
2 CPU cores -> profile the server -> forecast -> validate the layouts on the same slice ->
recommend (weighing that validate) -> apply the recommendation live -> the report (HTML, PDF) -> where everything is ->
the dashboard until Ctrl-C. Each stage is one function in gpuprobe.demo.stages and runs the
same gpuprobe command a user would, as a process of its own; a stage that fails is named and
the demo goes on (one that needs its output says it is skipped, and why).
"""
from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

DEFAULT_STORE = ".demo/gpuprobe.db"  # not $GPUPROBE_STORE: the demo replaces its workloads, so never in yours


def run_demo(store_path: str | None, dashboard: bool = True, quick: bool = False) -> int:
    """0 when every stage ran; 1 when one failed (each is named)."""
    from gpuprobe.demo import stages as st
    from gpuprobe.demo.clock import Clock
    from gpuprobe.demo.common import FULL, QUICK, Run, say
    from gpuprobe.store import Store

    path = Path(store_path or DEFAULT_STORE)
    path.parent.mkdir(parents=True, exist_ok=True)
    run = Run(store=path, out=path.parent, settings=QUICK if quick else FULL)
    clock = Clock(dict(run.settings.plan_s))
    t0 = time.perf_counter()
    say(f"gpuprobe demo{' --quick' if quick else ''}: store {path}, outputs in {run.out}/")
    for line in clock.plan_lines():
        say(line)
    with contextlib.ExitStack() as stack, Store.open(path) as store:
        with clock.stage("import"):
            st.stage_import(run, store)
            st.stage_analyze(run, store)
        with clock.stage("serve"):
            st.stage_serve(run, store, stack)
        for key, stage in (("replay", st.stage_replay), ("profile", st.stage_profile),
                           ("forecast", st.stage_forecast), ("validate", st.stage_validate),
                           ("recommend", st.stage_recommend), ("apply", st.stage_apply),
                           ("report", st.stage_report)):
            with clock.stage(key):
                stage(run, store)
        st.summary(run, store)
        say("\nwhere the time went:")
        for line in clock.table():
            say(line)
        say(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")
        sys.stdout.flush()
        if dashboard:
            st.serve_dashboard(run)
    return 1 if run.failed else 0
