"""Where does a decode step's time go? One model, batch 1, a few profiled steps.

On an H200 the reference server's 8B decode step at batch 1 took 64 ms against a 4 ms HBM
floor (docs/benchmarks.md). This prints the step's wall time beside the device time its
kernels took and the busiest operators, so the gap can be placed: kernels (device time near
the wall time) or launch and Python overhead (device time far below it).

Usage: python bench/decode_profile.py [--model llama3-8b-shape] [--device cuda] [--steps 8]
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-8b-shape")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--context", type=int, default=128)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpuprobe.engine import LLMEngine, SamplingParams, Scheduler, SchedulerConfig, Sequence
    from gpuprobe.llama.runner import ModelRunner, load_model

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtype = torch.bfloat16 if cuda else torch.float32
    config, model, _ = load_model(args.model, args.device, dtype)
    runner = ModelRunner(config, 256, 16, args.device, None, dtype, model=model)
    eng = LLMEngine(Scheduler(SchedulerConfig(num_blocks=256, eos_token_id=None)), runner)
    eng.add_request(Sequence("p", [1 + i % 200 for i in range(args.context)],
                             SamplingParams(max_tokens=3 * args.steps + 20, ignore_eos=True)))
    for _ in range(10):  # prefill and warm-up
        eng.step()
    walls = []
    for _ in range(args.steps):
        sync()
        t0 = time.perf_counter()
        eng.step()
        sync()
        walls.append(time.perf_counter() - t0)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(args.steps):
            eng.step()
        sync()
    events = prof.key_averages()
    dev_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in events) if cuda else 0
    launches = sum(e.count for e in events if e.key.startswith(("cudaLaunchKernel",
                                                                "cuLaunchKernel")))
    print(f"{args.model} on {args.device}, batch 1, context {args.context}: "
          f"step {statistics.median(walls) * 1e3:.2f} ms wall (median of {args.steps})")
    if cuda:
        print(f"  device time of its kernels {dev_us / args.steps / 1e3:.2f} ms a step, "
              f"{launches / args.steps:.0f} kernel launches a step")
    try:
        print(events.table(sort_by="self_device_time_total" if cuda else "self_cpu_time_total",
                           row_limit=15))
    except (AttributeError, KeyError, ValueError):  # an older torch names the column otherwise
        print(events.table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
