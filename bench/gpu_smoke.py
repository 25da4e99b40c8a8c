"""Start one layout of the reference server, complete one request, print its workers' partitions
and the KV hand-over time, stop. Part of bench/gpu_check.sh; exits non-zero if anything fails.

Usage: python bench/gpu_smoke.py LAYOUT [--model M] [--device cuda] [--kv-cache-mb N]
"""
from __future__ import annotations

import argparse
import json
import time
import urllib.request

from gpuprobe.server.launch import start_server

TOKEN = "gpu-check"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layout")
    ap.add_argument("--model", default="llama3-8b-shape")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kv-cache-mb", type=int, default=2048)
    ap.add_argument("--log", default=None)
    args = ap.parse_args()
    say = lambda msg: print(f"[{args.layout}] {msg}", flush=True)  # noqa: E731
    t0 = time.time()
    with start_server(args.model, args.layout, device=args.device, kv_cache_mb=args.kv_cache_mb,
                      timeout_s=140, log_path=args.log or f"server_{args.layout}.log",
                      env={"GPUPROBE_ADMIN_TOKEN": TOKEN}) as srv:
        ready = time.time() - t0
        body = json.dumps({"prompt": [1 + i % 200 for i in range(512)], "max_tokens": 64,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(srv.url + "/v1/completions", body,
                                     {"Content-Type": "application/json"})
        t1 = time.time()
        out = json.load(urllib.request.urlopen(req, timeout=120))
        say(f"ready in {ready:.1f}s, 512+64 tokens in {time.time() - t1:.2f}s, "
            f"usage {out['usage']}")
        admin = urllib.request.Request(srv.url + "/admin/workers",
                                       headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(admin) as r:
            for w in json.load(r)["workers"]:
                say(f"  {w['worker']}: {w['role']}, {w['partition']}")
        with urllib.request.urlopen(srv.url + "/metrics") as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith("gpuprobe_kv_handoff_seconds_") and "_bucket" not in line:
                say(f"  {line}")


if __name__ == "__main__":
    main()
