"""`gpuprobe demo`: the whole product on this machine (what `make demo` runs)."""
from __future__ import annotations

from gpuprobe.demo import DEFAULT_STORE

NAME = "demo"
HELP = (f"run the main job end to end here: serve, replay, profile, forecast, recommend, validate, "
        f"apply, report, dashboard (store: {DEFAULT_STORE})")


def add_arguments(p) -> None:
    p.add_argument("--no-dashboard", action="store_true",
                   help="exit after the report instead of serving the dashboard at http://127.0.0.1:8501")
    p.add_argument("--quick", action="store_true",
                   help="the same stages, smaller: the tiny model and fewer requests (what the test runs)")
    p.epilog = (f"The demo keeps its results in {DEFAULT_STORE}, never in $GPUPROBE_STORE: it replaces "
                "its workloads azure-code and azure-conv, so it stays out of your store unless you name "
                "one with --store PATH.")


def run(args) -> int:
    from gpuprobe.demo import run_demo
    return run_demo(args.store, dashboard=not args.no_dashboard, quick=args.quick)
