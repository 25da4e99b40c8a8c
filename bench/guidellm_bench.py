"""guidellm (vLLM's benchmark client, from PyPI) against `gpuprobe serve --model smollm2-135m`,
directly and through `gpuprobe tap`; its figures beside the store's, for the same requests.

guidellm runs from its own venv (.bench-venv/, ignored; created with pip on first use) and
counts tokens offline with a tokenizer folder (.bench-tokenizer/) written from the SmolLM2
GGUF the server loads, so nothing is fetched from the Hugging Face Hub (HF_HUB_OFFLINE=1).
Each run: constant rate, synthetic prompts of --prompt-tokens, --output-tokens forced
(guidellm sends max_tokens + ignore_eos), chat completions, streaming.

Printed per run: requests (ok / refused (guidellm: errored) / incomplete (guidellm: cut off
when the run ended; store: aborted or disconnected)), TTFT p50/p90 and ITL (guidellm's per-request
(last - first token) / (tokens - 1)) p50, from guidellm's report and from the store's rows
of the same window (source "server", and "tap" for the tapped run), with the ratio
store / guidellm.

Usage: .venv/bin/python bench/guidellm_bench.py [--requests 40] [--rate 0.25] [--out out/guidellm]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENV = ROOT / ".bench-venv"
TOKENIZER = ROOT / ".bench-tokenizer"
GUIDELLM_VERSION = "0.8.1"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


TORCH = "torch==2.13.0"


def ensure_guidellm() -> pathlib.Path:
    exe = VENV / "bin" / "guidellm"
    if exe.exists():
        return exe
    print(f"creating {VENV} with guidellm=={GUIDELLM_VERSION} (pip; several minutes) ...",
          flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    # torch first, pinned as the project pins it: its CPU wheel, not the several-GB CUDA build
    # that guidellm's dependencies would otherwise pull in.
    pip = subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", TORCH,
                          f"guidellm=={GUIDELLM_VERSION}"], capture_output=True, text=True)
    if pip.returncode != 0:
        sys.exit("guidellm_bench: cannot install guidellm from PyPI: "
                 + (pip.stderr.strip().splitlines() or ["(no output)"])[-1])
    return exe


def write_tokenizer(folder: pathlib.Path) -> int:
    """tokenizer.json + tokenizer_config.json from the GGUF, so transformers' AutoTokenizer
    loads the server's own tokenizer offline. Returns the model's context length."""
    from gpuprobe.server.front_model import load_front_model

    model = load_front_model("smollm2-135m", 256, 16, "cpu")
    tok = model.tokenizer
    folder.mkdir(parents=True, exist_ok=True)
    tok._tok.save(str(folder / "tokenizer.json"))  # the tokenizers object the server encodes with
    name = tok._tok.id_to_token
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": name(tok.bos_token_id),
        "eos_token": name(tok.eos_token_id), "model_max_length": model.max_context,
        "chat_template": tok.chat_template}, indent=1))
    return model.max_context


def run_guidellm(exe, target: str, args, report: pathlib.Path) -> tuple[float, float, str]:
    cmd = [str(exe), "run",
           "--backend", f"kind=openai_http,target={target},model=smollm2-135m",
           "--profile", f"kind=constant,rate={args.rate}",
           "--constraint", f"kind=max_requests,count={args.requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},"
                     f"output_tokens={args.output_tokens}",
           "--tokenizer", f"kind=hf_auto,model={TOKENIZER}",
           "--output", f"kind=json,path={report}", "--disable-console-interactive"]
    print(f"guidellm -> {target}: {args.requests} requests at {args.rate} req/s ...", flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, env={**os.environ, **OFFLINE_ENV}, capture_output=True,
                          text=True, timeout=args.timeout)
    t1 = time.time()
    if proc.returncode != 0 or not report.exists():
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        sys.exit(f"guidellm_bench: guidellm exited {proc.returncode} without a report: {tail}")
    return t0, t1, proc.stdout


def _summary(node: dict, status: str = "successful") -> dict:
    s = (node or {}).get(status) or {}
    pct = s.get("percentiles") or {}
    return {"p50": s.get("median"), "p90": pct.get("p90"), "count": s.get("count")}


def guidellm_figures(report: pathlib.Path) -> dict:
    bench = json.loads(report.read_text())["benchmarks"][0]
    m = bench["metrics"]
    totals = (m.get("request_totals") or {})
    ttft, itl = _summary(m["time_to_first_token_ms"]), _summary(m["inter_token_latency_ms"])
    return {"ok": totals.get("successful"), "refused": totals.get("errored"),
            "incomplete": totals.get("incomplete"),
            "ttft_p50_ms": ttft["p50"], "ttft_p90_ms": ttft["p90"], "itl_p50_ms": itl["p50"]}


def store_figures(store_path, source: str, t0: float, t1: float) -> dict:
    from gpuprobe.store import Store

    with Store.open(store_path, read_only=True) as store:
        rows = store.requests(source=source)
    rows = rows[(rows.arrival_s >= t0) & (rows.arrival_s <= t1)]
    ok = rows[rows.status == "ok"]
    itl = []
    for times in ok.token_times:
        t = json.loads(times) if isinstance(times, str) else times
        if len(t) > 1:
            itl.append((t[-1] - t[0]) / (len(t) - 1))
    ttft = ok.ttft_s.dropna().to_numpy() * 1e3
    refused = rows.status.str.startswith("http_")
    return {"ok": len(ok), "refused": int(refused.sum()),
            "incomplete": int((~refused & (rows.status != "ok")).sum()),
            "ttft_p50_ms": float(np.median(ttft)) if len(ttft) else None,
            "ttft_p90_ms": float(np.percentile(ttft, 90)) if len(ttft) else None,
            "itl_p50_ms": float(np.median(itl)) * 1e3 if itl else None}


def matched(report_path: pathlib.Path, store_path, source: str) -> str:
    """guidellm's per-request TTFT and ITL against the store's row of the same response id."""
    from gpuprobe.store import Store

    reqs = json.loads(report_path.read_text())["benchmarks"][0]["requests"]["successful"]
    with Store.open(store_path, read_only=True) as store:
        rows = store.requests(source=source).set_index("request_id")
    ttft, itl = [], []
    for r in reqs:
        if r.get("response_id") not in rows.index:
            continue
        row = rows.loc[r["response_id"]]
        t = json.loads(row.token_times) if isinstance(row.token_times, str) else row.token_times
        ttft.append(row.ttft_s * 1e3 - r["time_to_first_token_ms"])
        if len(t) > 1 and r.get("inter_token_latency_ms") is not None:
            itl.append((t[-1] - t[0]) / (len(t) - 1) * 1e3 - r["inter_token_latency_ms"])
    if not ttft:
        return f"{source}: no request matched guidellm's response ids"
    return (f"{source} - guidellm, the same {len(ttft)} requests: TTFT median "
            f"{np.median(ttft):+.1f} ms (range {min(ttft):+.1f} .. {max(ttft):+.1f}), ITL "
            f"median {np.median(itl):+.2f} ms (range {min(itl):+.2f} .. {max(itl):+.2f})")


def report(out: pathlib.Path, args, windows: dict) -> None:
    store = out / "bench.db"
    (d0, d1), (t0, t1) = windows["direct"], windows["tapped"]
    print(f"\nsmollm2-135m, {args.requests} chat requests at {args.rate} req/s, "
          f"{args.prompt_tokens} prompt / {args.output_tokens} output tokens (times in ms)")
    print_table("direct: guidellm -> serve",
                {"guidellm": guidellm_figures(out / "direct.json"),
                 "server": store_figures(store, "server", d0, d1)})
    print(matched(out / "direct.json", store, "server"))
    print_table("tapped: guidellm -> tap -> serve",
                {"guidellm": guidellm_figures(out / "tapped.json"),
                 "tap": store_figures(store, "tap", t0, t1),
                 "server": store_figures(store, "server", t0, t1)})
    print(matched(out / "tapped.json", store, "tap"))
    print(matched(out / "tapped.json", store, "server"))


def print_table(title: str, columns: dict[str, dict]) -> None:
    names = list(columns)
    print(f"\n{title}")
    print(f"{'':14}" + "".join(f"{n:>14}" for n in names)
          + "".join(f"{n + '/guidellm':>18}" for n in names[1:]))
    for key in ("ok", "refused", "incomplete", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms"):
        vals = [columns[n].get(key) for n in names]
        cells = "".join(f"{v:>14.1f}" if isinstance(v, float) else f"{str(v):>14}" for v in vals)
        base = vals[0]
        ratios = "".join(f"{(v / base):>18.3f}" if isinstance(v, (int, float)) and base
                         else f"{'-':>18}" for v in vals[1:])
        print(f"{key:14}{cells}{ratios}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--rate", type=float, default=0.25, help="requests per second")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--max-queue-wait", default="10s", help="the server's admission limit")
    ap.add_argument("--timeout", type=float, default=3600, help="per guidellm run, s")
    ap.add_argument("--out", default="out/guidellm")
    ap.add_argument("--report-only", action="store_true",
                    help="print the tables again from --out's reports, store and windows.json")
    args = ap.parse_args()
    if args.report_only:
        out = pathlib.Path(args.out)
        report(out, args, json.loads((out / "windows.json").read_text()))
        return

    from gpuprobe.server.kv_transfer import free_port
    from gpuprobe.server.launch import start_server

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    exe = ensure_guidellm()
    write_tokenizer(TOKENIZER)
    store = out / "bench.db"
    print("starting gpuprobe serve --model smollm2-135m and gpuprobe tap ...", flush=True)
    srv = start_server("smollm2-135m", "monolithic", store=str(store),
                       log_path=str(out / "server.log"), max_queue_wait=args.max_queue_wait)
    port = free_port()
    tap = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "tap", "--upstream",
                            srv.url, "--listen", f"127.0.0.1:{port}", "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "listening" in tap.stdout.readline()
        d0, d1, _ = run_guidellm(exe, srv.url, args, out / "direct.json")
        t0, t1, _ = run_guidellm(exe, f"http://127.0.0.1:{port}", args, out / "tapped.json")
    finally:
        tap.terminate()
        tap.wait(30)
        srv.stop()
    windows = {"direct": [d0, d1], "tapped": [t0, t1]}
    (out / "windows.json").write_text(json.dumps(windows))
    report(out, args, windows)


if __name__ == "__main__":
    main()
