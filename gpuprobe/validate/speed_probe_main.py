"""The speed probe's child process (imports torch): time one small engine run per core, forever.

    python -m gpuprobe.validate.speed_probe_main --cores 0,1 --period 0.15

Prints one line per probe, `monotonic_s core cpu_s`: the thread CPU time of two engine steps
(a prefill of 8 two-token prompts, then one decode step) of the tiny model on that core, the
same Python, scheduler and torch path a reference-server worker takes per step. Thread CPU
time, not wall time: a probe that waits for the core (the worker under test holds it) still
reads the core's speed, not the queue for it. It moves itself core to core, one probe every
`period` seconds, so each core is probed every `period * len(cores)` s (about 5 ms of CPU per
probe: under 2% of a core at the defaults).
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def _engine_run(runner, cfg) -> float:
    from gpuprobe.engine import LLMEngine, SamplingParams, Scheduler, Sequence

    engine = LLMEngine(Scheduler(cfg), runner)
    for i in range(8):
        engine.add_request(Sequence(f"probe-{i}", [1, 2], SamplingParams(max_tokens=2, ignore_eos=True)))
    start = time.thread_time()
    while engine.has_unfinished():
        engine.step()
    return time.thread_time() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="speed_probe_main")
    ap.add_argument("--cores", required=True, help="comma-separated CPU ids")
    ap.add_argument("--period", type=float, default=0.15)
    args = ap.parse_args(argv)
    cores = [int(c) for c in args.cores.split(",") if c.strip()]
    import torch

    from gpuprobe.engine import SchedulerConfig
    from gpuprobe.llama.runner import ModelRunner, load_model

    torch.set_num_threads(1)
    config, model, _ = load_model("tiny", "cpu", torch.float32)
    runner = ModelRunner(config, 16, 16, "cpu", 1, torch.float32, model)
    cfg = SchedulerConfig(num_blocks=16, block_size=16)
    _engine_run(runner, cfg)  # first-run costs (allocator, thread pool) are not the core's speed
    while True:
        for core in cores:
            try:
                os.sched_setaffinity(0, {core})
            except OSError:  # the core went away (cpuset changed): skip it
                continue
            _engine_run(runner, cfg)  # after the move: caches cold, an idle vCPU waking up
            cpu_s = _engine_run(runner, cfg)
            print(f"{time.monotonic():.4f} {core} {cpu_s:.6f}", flush=True)
            time.sleep(args.period)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)
