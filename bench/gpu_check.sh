#!/usr/bin/env bash
# Reference-server check for a GPU session (not run on the CPU-only dev box).
# Runs the three layouts with llama3-8b-shape (random weights, bf16) on CUDA and prints the
# same figures as bench/refserver_bench.py: batch-1 decode vs the HBM-bandwidth floor,
# continuous vs static batching, and p99 TBT with/without long prefills per layout.
# Budget: about 8 minutes on one H100/H200. Usage: bash bench/gpu_check.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-${OUT:-/tmp/gpuprobe_gpu_check}}
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv | tee "$OUT/gpu.csv"
"$PY" - <<'PY' | tee "$OUT/torch.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0))
gc = getattr(torch.cuda, "green_contexts", None)
print("green contexts:", "available" if gc is not None else "absent (intra falls back to MPS %)")
PY

# 1. A smoke test of each layout on CUDA: start, one completion, stop.
for layout in monolithic intra cross; do
  "$PY" - "$layout" <<'PY' 2>&1 | tee -a "$OUT/smoke.txt"
import sys, time, json, urllib.request
from gpuprobe.server.launch import start_server
layout = sys.argv[1]
t0 = time.time()
with start_server("llama3-8b-shape", layout, device="cuda", kv_cache_mb=8192,
                  timeout_s=600, log_path=f"/tmp/gpu_{layout}.log") as srv:
    ready = time.time() - t0
    body = json.dumps({"prompt": list(range(1, 513)), "max_tokens": 64, "ignore_eos": True}).encode()
    req = urllib.request.Request(srv.url + "/v1/completions", body, {"Content-Type": "application/json"})
    t1 = time.time()
    out = json.load(urllib.request.urlopen(req, timeout=300))
    print(f"{layout}: ready in {ready:.1f}s, 512+64 tokens in {time.time() - t1:.2f}s, "
          f"usage {out['usage']}")
    with urllib.request.urlopen(srv.url + "/metrics") as r:
        text = r.read().decode()
    print("  ", [l for l in text.splitlines() if l.startswith("gpuprobe_kv_handoff_seconds_sum")])
PY
done

# 2. The bench figures on CUDA (decode floor for llama3-8b-shape; interference per layout).
timeout 900 "$PY" bench/refserver_bench.py --device cuda --floor-models llama3-8b-shape \
  --model llama3-8b-shape --prefill-tokens 4096 --window 20 --kv-cache-mb 16384 \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
echo "results in $OUT"
