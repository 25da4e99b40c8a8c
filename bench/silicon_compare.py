"""The figures tests/test_silicon.py compares, as a table: gpuprobe's step costs from measured
silicon data (its StepCost fit) beside AIConfigurator's own static estimate, both computed in
this run (AIConfigurator's through its SDK, by the test's own function).

    .venv/bin/python bench/silicon_compare.py [--gpus h200,h100] [--tp 1,2] [--engine vllm]
"""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="h200,h100")
    ap.add_argument("--tp", default="1,2")
    args = ap.parse_args()
    from gpuprobe.perf import silicon
    from gpuprobe.perf.silicon_profile import spec_profile

    if why := silicon.available():
        print(f"skipped: {why}")
        return
    path = Path(__file__).resolve().parents[1] / "tests" / "test_silicon.py"
    spec = importlib.util.spec_from_file_location("test_silicon", path)
    test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test)
    print("| GPU (data) | TP | step | AIConfigurator ms | gpuprobe ms | gpuprobe / AIC |")
    print("|---|---|---|---|---|---|")
    for gpu in args.gpus.split(","):
        for tp in map(int, args.tp.split(",")):
            prof = spec_profile("llama3-8b", gpu, "vllm", tp=tp)
            data = prof.meta["silicon"]["monolithic"]
            step = prof.workers["monolithic"].step_fn()
            theirs = test.aic_static(data["system"], tp)
            for (kind, n), want in theirs.items():
                got = (step(n, n * n, 0, 0) if kind == "prefill"
                       else step(0, 0, n, n * test.DECODE_CONTEXT))
                what = (f"prefill {n}" if kind == "prefill"
                        else f"decode {n} x {test.DECODE_CONTEXT}")
                print(f"| {data['system']} ({data['engine']} {data['version']}) | {tp} | {what} "
                      f"| {want * 1e3:.2f} | {got * 1e3:.2f} | {got / want:.3f} |")


if __name__ == "__main__":
    main()
