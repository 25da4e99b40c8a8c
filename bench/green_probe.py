"""Do the intra layout's two SM partitions really run side by side? (CUDA only.)

Times a bf16 matrix product loop on each side of green_partition's split, alone and at the same
time, first from one process (two green-context streams) and then from two processes (what the
intra layout does: a prefill worker and a decode worker). Disjoint partitions that run
concurrently give each side about its solo rate when both run; time-slicing between processes
(no MPS daemon) halves it.

Usage: python bench/green_probe.py [--share 0.5] [--seconds 3] [--mps-note TEXT]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time

N = 8192


def _loop(a, seconds: float, stream) -> float:
    """TFLOP/s of a @ a on `stream` for about `seconds`."""
    import torch

    torch.cuda.set_device(a.device)  # a new thread has no current context: make it so for cuBLAS
    with torch.cuda.stream(stream):
        a @ a
        torch.cuda.synchronize()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                a @ a
            n += 10
            stream.synchronize()
        return 2 * N**3 * n / (time.perf_counter() - t0) / 1e12


def one_process(share: float, seconds: float) -> dict:
    import threading

    import torch

    from gpuprobe.server import green_partition as gp

    torch.empty(1, device="cuda")
    parts = gp.split(share)
    sa = gp.stream_on(parts["prefill"], parts["device"])
    sb = gp.stream_on(parts["decode"], parts["device"])
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    out = {"sms": f"{parts['prefill_sms']}+{parts['decode_sms']} of {parts['total']}",
           "whole": _loop(a, seconds, torch.cuda.Stream()),
           "prefill_alone": _loop(a, seconds, sa), "decode_alone": _loop(a, seconds, sb)}
    res = {}
    threads = [threading.Thread(target=lambda k=k, s=s: res.__setitem__(k, _loop(a, seconds, s)))
               for k, s in (("prefill_both", sa), ("decode_both", sb))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {**out, **res}


def _worker(role: str, share: float, seconds: float, barrier, q) -> None:
    import torch

    from gpuprobe.server import green_partition as gp

    what = gp.enter_partition(role, share)
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.current_stream()
    solo = None
    if barrier is not None:  # first alone, one after the other, then both together
        for turn in ("prefill", "decode"):
            barrier.wait()
            if turn == role:
                solo = _loop(a, seconds, stream)
        barrier.wait()
    q.put((role, what, solo, _loop(a, seconds, stream)))


def two_processes(share: float, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, share, seconds, barrier, q))
             for r in ("prefill", "decode")]
    for p in procs:
        p.start()
    got = {}
    for _ in procs:
        role, what, solo, both = q.get(timeout=120)
        got.update({f"{role}_alone": solo, f"{role}_both": both, f"{role}_partition": what})
    for p in procs:
        p.join(30)
    return got


def _print(title: str, r: dict) -> None:
    print(title)
    for k, v in r.items():
        print(f"  {k:<20} {v:8.1f} TFLOP/s" if isinstance(v, float) else f"  {k:<20} {v}")
    for side in ("prefill", "decode"):
        if r.get(f"{side}_alone"):
            print(f"  {side}: {r[f'{side}_both'] / r[f'{side}_alone']:.2f}x its solo rate "
                  f"while the other side runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", choices=["one", "two"], default=None)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    if args.only in (None, "one"):
        _print(f"one process, two green-context streams {args.note}",
               one_process(args.share, args.seconds))
    if args.only in (None, "two"):
        _print(f"two processes (the intra layout's workers) {args.note}",
               two_processes(args.share, args.seconds))


if __name__ == "__main__":
    main()
