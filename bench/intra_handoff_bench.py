"""Intra's KV handoff against a busy prefill worker: does the sender's own compute slow the
receive?

On the CPU, intra's PipeHandoff moves each KV tensor to shared memory and sends a handle; the
decode worker's receive fetches the file descriptor from the prefill process (torch's
file_descriptor sharing), so that process has to run for the receive to finish. Two pinned
processes as in the server (prefill on one core, decode on the other, one torch thread each):
the sender hands over a KV, then either computes a prefill-sized step (a chain of small
torch ops, as a model forward issues) or sleeps as long; the receiver polls its end of the
pipe and stamps when the KV is in its hands. Blocks of both modes alternate, so the machine's
speed moves both alike; prints the latency per mode and their ratio.

    .venv/bin/python bench/intra_handoff_bench.py [--reps 60] [--tokens 64,512] [--step-ms 20]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

KV_SHAPE = (2, 2, 64)  # tiny model: layers, kv heads, head dim (x2 for K and V, float32)


def _pin(core: int) -> None:
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[core % len(cores)]})


def _step(seconds: float, x, w) -> None:
    """Compute for about `seconds`: small matmuls one after another, the GIL taken between."""
    import torch
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        x = torch.tanh(x @ w)


def sender(conn, plan, step_s: float, ready) -> None:
    import torch
    from gpuprobe.server.handoff import PipeHandoff
    _pin(0)
    torch.set_num_threads(1)
    h = PipeHandoff("prefill", conn)
    x, w = torch.randn(64, 256), torch.randn(256, 256) / 16
    layers, heads, dim = KV_SHAPE
    ready.wait()
    for i, (mode, tokens) in enumerate(plan):
        kv = [torch.randn(layers, 2, tokens, heads, dim)]
        h.send({"rid": str(i), "mode": mode, "t_send": time.monotonic()}, kv)
        if mode == "busy":
            _step(step_s, x, w)
        else:
            time.sleep(step_s)
    h.send({"rid": "end"}, [])


def receiver(conn, out, ready) -> None:
    import torch
    from gpuprobe.server.handoff import PipeHandoff
    _pin(1)
    torch.set_num_threads(1)
    h = PipeHandoff("decode", conn)
    rows = []
    ready.set()
    while True:
        for meta, kv in h.receive_ready():
            if meta["rid"] == "end":
                out.put(rows)
                return
            t = time.monotonic()
            rows.append((meta["mode"], meta["kv_bytes"], t - meta["t_send"]))
            del kv
        time.sleep(0.0001)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=60, help="handoffs per mode and size")
    ap.add_argument("--tokens", default="64,512", help="prompt tokens per handoff")
    ap.add_argument("--step-ms", type=float, default=20.0,
                    help="the sender's step (busy) or sleep (idle) after each handoff")
    ap.add_argument("--block", type=int, default=10, help="handoffs per block of one mode")
    a = ap.parse_args()
    sizes = [int(t) for t in a.tokens.split(",")]
    plan = []
    for b in range(a.reps // a.block):
        for mode in (("idle", "busy") if b % 2 == 0 else ("busy", "idle")):
            for tokens in sizes:
                plan += [(mode, tokens)] * a.block
    ctx = mp.get_context("spawn")
    a_end, b_end = ctx.Pipe()
    out, ready = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=receiver, args=(b_end, out, ready)),
             ctx.Process(target=sender, args=(a_end, plan, a.step_ms / 1e3, ready))]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    rows = out.get(timeout=600)
    for p in procs:
        p.join(30)
    print(f"{len(rows)} handoffs in {time.monotonic() - t0:.1f} s, sender step {a.step_ms:g} ms, "
          f"cores {sorted(os.sched_getaffinity(0))}")
    print("| KV bytes | sender idle: p50 / p90 ms | sender busy: p50 / p90 ms | busy / idle, p50 |")
    print("|---|---|---|---|")
    for nbytes in sorted({r[1] for r in rows}):
        lat = {m: np.array([r[2] for r in rows if r[0] == m and r[1] == nbytes]) * 1e3
               for m in ("idle", "busy")}
        i50, b50 = np.median(lat["idle"]), np.median(lat["busy"])
        print(f"| {nbytes:,} | {i50:.2f} / {np.percentile(lat['idle'], 90):.2f} | "
              f"{b50:.2f} / {np.percentile(lat['busy'], 90):.2f} | {b50 / i50:.2f}x |")


if __name__ == "__main__":
    main()
