"""A full garbage collection in the server's front process, with the start-up heap (tokenizer,
model config) walked by the collector as before, and frozen out of its reach as `gpuprobe serve`
now does (front_model.freeze_startup_heap). Both measured in the same process and run; while a
full collection runs, the front's event loop streams no token.

    .venv/bin/python bench/front_gc_bench.py [--model tiny] [--reps 15]
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import gpuprobe.server.main  # noqa: F401  (the front's own imports: aiohttp, router, metrics)
from gpuprobe.server.front_model import freeze_startup_heap, load_front_model
from gpuprobe.server.options import ServeOptions


def full_collection_ms(reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    o = ServeOptions()
    model = load_front_model(args.model, o.kv_cache_mb, o.block_size, "cpu", o.model_overrides)
    tracked = len(gc.get_objects())
    before = full_collection_ms(args.reps)
    frozen = freeze_startup_heap()
    after = full_collection_ms(args.reps)
    print(f"model {args.model} ({model.name}): {tracked} objects tracked, {frozen} frozen")
    print(f"full collection, start-up heap walked: {before:.2f} ms (median of {args.reps})")
    print(f"full collection, start-up heap frozen: {after:.3f} ms")
    print(f"walked / frozen: {before / after:.0f}x" if after >= 0.01 else
          f"walked / frozen: over {before / 0.01:.0f}x (frozen below 0.01 ms)")


if __name__ == "__main__":
    main()
