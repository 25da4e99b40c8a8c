#!/usr/bin/env bash
# The GPU checks the issues name, as one script for a session that is lent a GPU (it cannot run
# on the CPU-only dev box). Each part has its own timeout; the whole stays under 10 minutes on
# one H100/H200 so that a rerun fits in a 15-minute device budget.
#   1. the agent for 60 s through a matmul load, then a memory-copy load: SM utilization must
#      follow the first and DRAM bandwidth utilization the second (GPM where supported);
#   2. the three layouts with llama3-8b-shape (random weights, bf16) on CUDA: start, one
#      completion, stop;
#   3. bench/refserver_bench.py on CUDA: batch-1 decode vs the HBM floor, continuous vs static
#      batching, p99 TBT with and without long prefills per layout;
#   4. gpuprobe validate with llama3-8b-shape on CUDA (predicted vs measured per layout).
# Usage: bash bench/gpu_check.sh [OUT_DIR]   (prints everything; record it in docs/benchmarks.md)
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

# 1. The agent through a compute load and then a memory load.
timeout 150 "$PY" - "$OUT" <<'PY' 2>&1 | tee "$OUT/agent.txt"
import subprocess, sys, time
import torch
from gpuprobe.store import Store
db = f"{sys.argv[1]}/agent.db"
agent = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "agent", "--duration", "62",
                          "--store", db, "--interval-nvml", "0.5", "--interval-gpm", "0.5",
                          "--metrics-port", "0"])
time.sleep(3)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t_mm = time.time()
while time.time() < t_mm + 27:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
t_cp = time.time()
while time.time() < t_cp + 27:
    dst.copy_(src)
    torch.cuda.synchronize()
agent.wait(60)
with Store.open(db, read_only=True) as store:
    for metric in ("sm_util_pct", "dram_bw_util_pct", "tensor_util_pct", "nvml_gpu_busy_pct"):
        df = store.samples(metric)
        mm = df[(df.ts_s > t_mm + 2) & (df.ts_s < t_mm + 27)]["value"].mean()
        cp = df[(df.ts_s > t_cp + 2) & (df.ts_s < t_cp + 27)]["value"].mean()
        print(f"{metric:<20} matmul phase {mm:6.1f}   copy phase {cp:6.1f}   ({len(df)} samples)")
PY

# 2. A smoke test of each layout on CUDA: start, one completion, stop.
for layout in monolithic intra cross; do
  timeout 200 "$PY" - "$layout" <<'PY' 2>&1 | tee -a "$OUT/smoke.txt"
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

# 3. The bench figures on CUDA (decode floor for llama3-8b-shape; interference per layout).
timeout 200 "$PY" bench/refserver_bench.py --device cuda --floor-models llama3-8b-shape \
  --model llama3-8b-shape --prefill-tokens 4096 --window 8 --kv-cache-mb 16384 \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" || echo "bench: timed out or failed"

# 4. validate with llama3-8b-shape on CUDA, a short slice of the conversation trace.
timeout 240 "$PY" -m gpuprobe.cli.main validate --workload azure-conv --model llama3-8b-shape \
  --device cuda --limit 200 --token-scale 1.0 --store "$OUT/validate.db" 2>&1 | tee "$OUT/validate.txt" \
  || echo "validate: timed out or failed"
echo "results in $OUT"
