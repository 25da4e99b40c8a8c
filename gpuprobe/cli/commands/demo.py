"""`gpuprobe demo`: the whole pipeline on the bundled traces (what `make demo` runs)."""
from __future__ import annotations

NAME = "demo"
HELP = "run the main job end to end on the bundled Azure traces (store: .demo/gpuprobe.db)"


def add_arguments(p) -> None:
    p.epilog = "Use --store PATH to keep the demo's results somewhere else."


def run(args) -> int:
    from gpuprobe.demo import run_demo
    return run_demo(args.store)
