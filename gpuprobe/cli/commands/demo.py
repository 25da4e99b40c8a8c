"""`gpuprobe demo`: the whole pipeline on the bundled traces (what `make demo` runs)."""
from __future__ import annotations

from gpuprobe.demo import DEFAULT_STORE

NAME = "demo"
HELP = f"run the main job end to end on the bundled Azure traces (store: {DEFAULT_STORE})"


def add_arguments(p) -> None:
    p.epilog = (f"The demo keeps its results in {DEFAULT_STORE}, never in $GPUPROBE_STORE: it replaces "
                "its workloads azure-code and azure-conv, so it stays out of your store unless you name "
                "one with --store PATH.")


def run(args) -> int:
    from gpuprobe.demo import run_demo
    return run_demo(args.store)
