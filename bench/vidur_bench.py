"""gpuprobe's simulator against Vidur (Microsoft's LLM serving simulator) on the Azure
conversation trace: simulated requests per CPU-second, one replica of llama3-8b, monolithic.

gpuprobe: exactly what bench/sim_bench.py times for the monolithic layout. Vidur (installed in
its own environment, never in the project's): one replica, vLLM scheduler, the same arrivals
and token counts, the same limits (256 sequences, 16,384 batched tokens, 40,000 blocks of 16).
Vidur's wheel ships no profiling data, so this writes its profile CSVs from gpuprobe's roofline
(llama3-8b / H200) into a temporary folder: both simulators then price a step about the same.
Vidur's setup (trace load, predictor training) is timed apart from its event loop; its rate
and the ratio use the loop only. Two Vidur rows: its default Python execution-time lookup and
its optional C++ one. CPU time (process_time), the fastest of --repeat runs, each Vidur run in
a fresh subprocess (bench/vidur_driver.py).

    python3 -m venv /tmp/vidur-venv && /tmp/vidur-venv/bin/pip install vidur==0.0.26
    .venv/bin/python bench/vidur_bench.py --vidur-python /tmp/vidur-venv/bin/python \
        [--limit N] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sim_bench import config, load_conv

from gpuprobe.perf.roofline import model_shape, roofline_profile
from gpuprobe.sim.simulator import simulate

DRIVER = Path(__file__).with_name("vidur_driver.py")
INSTALL = "python3 -m venv /tmp/vidur-venv && /tmp/vidur-venv/bin/pip install vidur==0.0.26"
MAX_TOKENS = 16384
# Vidur's Llama-3-8B, one GPU: the columns its predictor filters the profile rows on.
MODEL_COLS = {"n_head": 32, "n_kv_head": 8, "n_embd": 4096, "n_expanded_embd": 14336,
              "use_gated_mlp": True, "vocab_size": 128256, "num_tensor_parallel_workers": 1}
# Vidur rows: its default Python execution-time lookup, and its optional C++ one.
VIDUR_VARIANTS = {"Vidur 0.0.26, vLLM scheduler": False,
                  "Vidur 0.0.26, vLLM scheduler, native lookup": True}
ZERO_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_down_proj", "mlp_act", "input_layernorm",
            "post_attention_layernorm", "attn_rope", "add")


def gpuprobe_run(wl: pd.DataFrame, profile, repeat: int) -> dict:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        res = simulate(wl, profile, "monolithic", config=config())
        best = min(best, time.process_time() - t0)
    return {"requests": len(wl), "loop_s": best, "batches": res.summary["monolithic_steps"],
            "ttft_p50_s": res.summary["ttft_p50_s"],
            "tbt_mean_p50_s": float(res.requests["tbt_mean_s"].median())}


def write_trace(wl: pd.DataFrame, path: Path) -> None:
    """Vidur's trace-replay columns; one date label, arrivals in seconds from the first."""
    pd.DataFrame({"Date": "2023-11-16", "Time": wl["arrival_s"],
                  "PromptTokenCount": wl["prompt_tokens"],
                  "CompletionTokenCount": wl["output_tokens"]}).to_csv(path, index=False)


def write_profiles(profile, workdir: Path) -> None:
    """mlp.csv and attention.csv in Vidur's format, per layer in ms, from the roofline step:
    prefill a + b*T + c*Q (Q = sum of prompt^2), decode d0 + d1*B + d2*C (C = KV positions).
    a + b*tokens goes to mlp_up_proj (the roofline has a == d0, b == d1), the other
    token-count operators are 0; attn_prefill is c*Q with Q = kv^2 - (kv - chunk)^2 (kv counts
    the chunk, as in Vidur's lookup); attn_decode is d2 * batch * kv."""
    w = profile.workers["monolithic"]
    (a, b, c), (d0, d1, d2) = w.prefill.coef, w.decode.coef
    assert (a, b) == (d0, d1), "Vidur has one token-count curve for prefill and decode"
    ms = 1e3 / model_shape("llama3-8b").layers
    tokens = np.unique(np.geomspace(1, MAX_TOKENS, 400).astype(int))
    mlp = pd.DataFrame({**MODEL_COLS, "num_tokens": tokens,
                        "time_stats.mlp_up_proj.median": (a + b * tokens) * ms,
                        **{f"time_stats.{op}.median": 0.0 for op in ZERO_OPS}})
    mlp.to_csv(workdir / "mlp.csv", index=False)
    chunk, extra = np.meshgrid(np.arange(32, MAX_TOKENS + 1, 32), [0, 256, 1024, 4096])
    kv = chunk + extra
    keep = kv <= MAX_TOKENS
    prefill = pd.DataFrame({"batch_size": 1, "prefill_chunk_size": chunk[keep],
                            "kv_cache_size": kv[keep],
                            "time_stats.attn_prefill.median":
                                c * (kv[keep] ** 2 - extra[keep] ** 2) * ms})
    batch, kv = np.meshgrid(np.arange(1, 257, 5), np.arange(256, MAX_TOKENS + 1, 256))
    decode = pd.DataFrame({"batch_size": batch.ravel(), "prefill_chunk_size": 0,
                           "kv_cache_size": kv.ravel(),
                           "time_stats.attn_decode.median": d2 * (batch * kv).ravel() * ms})
    attn = pd.concat([prefill, decode], ignore_index=True)
    attn = attn.assign(n_embd=4096, n_q_head=32, n_kv_head=8, block_size=16,
                       num_tensor_parallel_workers=1, **{"time_stats.attn_kv_cache_save.median": 0.0})
    attn.to_csv(workdir / "attention.csv", index=False)


def vidur_run(python: str, workdir: Path, repeat: int, native: bool) -> dict:
    runs = []
    for _ in range(repeat):
        cmd = [python, str(DRIVER), str(workdir)] + (["--native"] if native else [])
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["loop_s"])
    return {**best, "setup_s": min(r["setup_s"] for r in runs)}


def vidur_ready(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import vidur"], capture_output=True,
                              check=False).returncode == 0
    except OSError:
        return False


def row(name: str, r: dict, ours_rate: float) -> str:
    rate = r["requests"] / r["loop_s"]
    setup = f"{r['setup_s']:.1f}" if "setup_s" in r else "-"
    return (f"| {name} | {r['requests']:,} | {r['batches']:,} | {rate:,.0f} | {ours_rate / rate:.1f}x "
            f"| {setup} | {r['ttft_p50_s'] * 1e3:.1f} ms | {r['tbt_mean_p50_s'] * 1e3:.2f} ms |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vidur-python", required=True, help="interpreter with vidur installed")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not vidur_ready(args.vidur_python):
        print(f"no Vidur at {args.vidur_python}; install it with: {INSTALL}")
        sys.exit(2)
    profile = roofline_profile("llama3-8b", "h200")
    wl = load_conv(args.limit)
    ours = gpuprobe_run(wl, profile, args.repeat)
    with tempfile.TemporaryDirectory(prefix="vidur-bench-") as tmp:
        workdir = Path(tmp)
        write_trace(wl, workdir / "trace.csv")
        write_profiles(profile, workdir)
        theirs = {name: vidur_run(args.vidur_python, workdir, args.repeat, native)
                  for name, native in VIDUR_VARIANTS.items()}
    ours_rate = ours["requests"] / ours["loop_s"]
    print("| simulator | requests | steps | simulated req/s (CPU) | gpuprobe / this "
          "| setup, CPU s | TTFT p50 | mean-TBT p50 |")
    print("|---|---|---|---|---|---|---|---|")
    print(row("gpuprobe, monolithic", ours, ours_rate))
    for name, r in theirs.items():
        print(row(name, r, ours_rate))


if __name__ == "__main__":
    main()
