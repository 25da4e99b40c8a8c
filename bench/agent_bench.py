"""Agent CPU cost and the tap's added latency, measured in one run on this machine.

    .venv/bin/python bench/agent_bench.py [--seconds 60]

1. Agent CPU as a share of one core over --seconds, at the default intervals and with every
   interval at 0.1 s: host sampling, the fake GPU (tests/fake_nvml.py, 2 GPUs, GPM on) and one
   scrape target serving the recorded vLLM /metrics. The agent runs in a child process; its
   user+system CPU time over the window is divided by the wall time. Target: <= 1% at defaults.
2. The tap's added latency per streamed token: an SSE upstream (its own process) stamps each
   chunk with its send time; a client reads the same streams directly and through `gpuprobe tap`
   and compares receive - send. Target: median added < 1 ms.
The bench is not a test: it prints figures and ratios.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "vllm_metrics.txt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_fake_nvml():
    spec = importlib.util.spec_from_file_location("fake_nvml", ROOT / "tests" / "fake_nvml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FakeNvml(num_gpus=2, gpm=True)


# --- child roles ----------------------------------------------------------------------------
def child_agent(seconds: float, interval: float | None, scrape_url: str, db: str) -> None:
    from gpuprobe.collectors import config
    from gpuprobe.collectors.agent import Agent

    from gpuprobe.store import Store

    iv = config.Intervals() if interval is None else config.Intervals(interval, interval, interval, interval, interval)
    cfg = config.AgentConfig(metrics_port=0, scrape=(scrape_url,), intervals=iv,
                             duration=seconds + 2.0)
    with Store.open(db, busy_timeout_s=0.5) as store:
        agent = Agent(cfg, store, nvml=load_fake_nvml(), log=lambda m: None)

        async def main():
            task = asyncio.create_task(agent.run())
            await asyncio.sleep(2.0)  # warm up: imports, first scrape, series rows
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            stats = await task
            r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            print(json.dumps({"cpu_s": cpu, "wall_s": t1 - t0, "samples": stats.num_produced}), flush=True)
        asyncio.run(main())


def child_upstream(port: int, num_tokens: int, gap_s: float) -> None:
    from aiohttp import web

    async def chat(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(num_tokens):
            chunk = {"id": "b", "object": "chat.completion.chunk", "model": "m", "sent_ns": time.time_ns(),
                     "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await asyncio.sleep(gap_s)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def metrics(request):
        return web.Response(text=FIXTURE.read_text())

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- parent ---------------------------------------------------------------------------------
def wait_port(port: int, timeout_s: float = 30) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not open")


def agent_cpu(seconds: float, interval: float | None, scrape_url: str, tmp: str) -> dict:
    cmd = [sys.executable, __file__, "--child-agent", str(seconds), str(interval or 0), scrape_url,
           os.path.join(tmp, f"agent-{interval}.db")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


async def token_latencies(url: str, num_streams: int) -> list[float]:
    import aiohttp

    lat = []
    async with aiohttp.ClientSession() as client:
        for _ in range(num_streams):
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            async with client.post(url + "/v1/chat/completions", json=body) as r:
                buf = b""
                async for chunk in r.content.iter_any():
                    now = time.time_ns()
                    buf += chunk
                    *events, buf = buf.split(b"\n\n")
                    for ev in events:
                        if ev.startswith(b"data: {"):
                            lat.append((now - json.loads(ev[6:])["sent_ns"]) / 1e6)
    return lat


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="CPU window per agent setting (default 60)")
    p.add_argument("--streams", type=int, default=40, help="streams per path for the tap latency (default 40)")
    args = p.parse_args()
    up_port, tap_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        upstream = subprocess.Popen([sys.executable, __file__, "--child-upstream", str(up_port)])
        tap = None
        try:
            wait_port(up_port)
            scrape = f"http://127.0.0.1:{up_port}/metrics"
            print(f"agent CPU over {args.seconds:g} s (host + fake GPU x2 with GPM + 1 scrape target):")
            results = {}
            for name, interval in (("default intervals", None), ("all intervals 0.1 s", 0.1)):
                r = agent_cpu(args.seconds, interval, scrape, tmp)
                results[name] = r
                share = 100.0 * r["cpu_s"] / r["wall_s"]
                print(f"  {name:22s} {share:6.2f}% of one core  ({r['samples'] / r['wall_s']:.0f} samples/s)")
            base = results["default intervals"]
            fast = results["all intervals 0.1 s"]
            print(f"  ratio 0.1 s / default: {fast['cpu_s'] / max(base['cpu_s'], 1e-9):.1f}x CPU")
            tap = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "tap", "--upstream",
                                    f"http://127.0.0.1:{up_port}", "--listen", f"127.0.0.1:{tap_port}",
                                    "--store", os.path.join(tmp, "tap.db")], stdout=subprocess.DEVNULL)
            wait_port(tap_port)
            asyncio.run(token_latencies(f"http://127.0.0.1:{tap_port}", 2))  # warm up
            direct = asyncio.run(token_latencies(f"http://127.0.0.1:{up_port}", args.streams))
            tapped = asyncio.run(token_latencies(f"http://127.0.0.1:{tap_port}", args.streams))
            md, mt = statistics.median(direct), statistics.median(tapped)
            print(f"tap latency per streamed token ({len(direct)} tokens each):")
            print(f"  direct median {md:.3f} ms, through tap {mt:.3f} ms, added {mt - md:.3f} ms "
                  f"(p90 added {_p(tapped, 0.9) - _p(direct, 0.9):.3f} ms)")
        finally:
            for proc in (tap, upstream):
                if proc is not None:
                    proc.terminate()
                    proc.wait(timeout=20)


def _p(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-agent":
        child_agent(float(sys.argv[2]), float(sys.argv[3]) or None, sys.argv[4], sys.argv[5])
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-upstream":
        child_upstream(int(sys.argv[2]), num_tokens=100, gap_s=0.002)
    else:
        main()
