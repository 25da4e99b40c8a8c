"""Intra's KV handoff on the CPU: the shared ring against torch's per-handoff handles, with
the sender busy or idle.

Two ways PipeHandoff can carry a KV: `ring`, copied into the shared-memory ring both workers
map at start (kv_ring, the server's way since 2026-12-03), and `handles`, torch's
multiprocessing reductions, which put each KV in fresh shared memory and have the receiver
fetch its file descriptor from the sending process (file_descriptor sharing), so that
process has to run for the receive to finish. Two pinned processes as in the server
(prefill on one core, decode on the other, one torch thread each): the sender hands over a
KV, then either computes a prefill-sized step (a chain of small torch ops, as a model
forward issues) or sleeps as long; the receiver polls its end of the pipe, copies the KV
into a cache-sized tensor (the import) and stamps. Blocks of every path and mode alternate,
so the machine's speed moves them alike; prints the latency of each and the ratios, the
handles path the baseline.

    .venv/bin/python bench/intra_handoff_bench.py [--reps 60] [--tokens 64,512] [--step-ms 20]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

from gpuprobe.server import kv_ring

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


def sender(conn, plan, step_s: float, ready, ring) -> None:
    import torch
    from gpuprobe.server.handoff import PipeHandoff
    from gpuprobe.server.kv_ring import KvRing
    _pin(0)
    torch.set_num_threads(1)
    paths = {"ring": PipeHandoff("prefill", conn, KvRing(*ring)),
             "handles": PipeHandoff("prefill", conn)}
    x, w = torch.randn(64, 256), torch.randn(256, 256) / 16
    layers, heads, dim = KV_SHAPE
    ready.wait()
    for i, (path, mode, tokens) in enumerate(plan):
        kv = torch.randn(layers, 2, tokens, heads, dim)
        paths[path].send({"rid": str(i), "path": path, "mode": mode,
                          "t_send": time.monotonic()}, kv)
        if mode == "busy":
            _step(step_s, x, w)
        else:
            time.sleep(step_s)
    paths["handles"].send({"rid": "end"}, [])


def receiver(conn, out, ready, ring, max_tokens) -> None:
    import torch
    from gpuprobe.server.handoff import PipeHandoff
    from gpuprobe.server.kv_ring import KvRing
    _pin(1)
    torch.set_num_threads(1)
    h = PipeHandoff("decode", conn, KvRing(*ring))
    layers, heads, dim = KV_SHAPE
    cache = torch.zeros(layers, 2, max_tokens, heads, dim)
    rows = []
    ready.set()
    while True:
        for meta, kv in h.receive_ready():
            if meta["rid"] == "end":
                out.put(rows)
                return
            cache[:, :, :kv.shape[2]] = kv  # the import
            h.release(meta)
            t = time.monotonic()
            rows.append((meta["path"], meta["mode"], meta["kv_bytes"], t - meta["t_send"],
                         "kv_ring_span" in meta))
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
    combos = [(p, m) for p in ("handles", "ring") for m in ("idle", "busy")]
    plan = []
    for b in range(a.reps // a.block):
        for path, mode in (combos if b % 2 == 0 else combos[::-1]):
            for tokens in sizes:
                plan += [(path, mode, tokens)] * a.block
    made = kv_ring.create_file(64)
    if made is None:
        raise SystemExit("intra_handoff_bench: no room in /dev/shm for a 16 MiB ring")
    ctx = mp.get_context("spawn")
    a_end, b_end = ctx.Pipe()
    out, ready = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=receiver, args=(b_end, out, ready, made, max(sizes))),
             ctx.Process(target=sender, args=(a_end, plan, a.step_ms / 1e3, ready, made))]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    try:
        rows = out.get(timeout=600)
    finally:
        os.unlink(made[0])
    for p in procs:
        p.join(30)
    missed = sum(1 for r in rows if r[0] == "ring" and not r[4])
    print(f"{len(rows)} handoffs in {time.monotonic() - t0:.1f} s, sender step {a.step_ms:g} ms, "
          f"cores {sorted(os.sched_getaffinity(0))}; ring handoffs that fell back: {missed}")
    print("| KV bytes | path | sender idle: p50 / p90 ms | sender busy: p50 / p90 ms | "
          "busy / idle, p50 | over handles, p50 idle / busy | p90 idle / busy |")
    print("|---|---|---|---|---|---|---|")
    for nbytes in sorted({r[2] for r in rows}):
        lat = {(p, m): np.array([r[3] for r in rows if r[:3] == (p, m, nbytes)]) * 1e3
               for p, m in combos}
        q = {k: (np.median(v), np.percentile(v, 90)) for k, v in lat.items()}
        for path in ("handles", "ring"):
            (i50, i90), (b50, b90) = q[(path, "idle")], q[(path, "busy")]
            (h_i50, h_i90), (h_b50, h_b90) = q[("handles", "idle")], q[("handles", "busy")]
            print(f"| {nbytes:,} | {path} | {i50:.2f} / {i90:.2f} | {b50:.2f} / {b90:.2f} | "
                  f"{b50 / i50:.2f}x | {i50 / h_i50:.2f}x / {b50 / h_b50:.2f}x | "
                  f"{i90 / h_i90:.2f}x / {b90 / h_b90:.2f}x |")


if __name__ == "__main__":
    main()
