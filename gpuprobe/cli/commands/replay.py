"""`gpuprobe replay`: send a workload to a server open loop and record client-side timings."""
from __future__ import annotations

import json
import sys

from gpuprobe.argtypes import http_url, nonneg_int, positive_float, positive_int

NAME = "replay"
HELP = "replay a workload against an OpenAI-compatible server (open loop) and record TTFT and token times"


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, help="workload name in the store, or a trace file")
    p.add_argument("--target", required=True, type=http_url, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--speed", type=positive_float, default=1.0, help="time compression: 2 sends twice as fast")
    p.add_argument("--token-scale", type=positive_float, default=1.0,
                   help="scale prompt and output lengths (min 1 token)")
    p.add_argument("--limit", type=positive_int, help="replay only the first N requests")
    p.add_argument("--max-concurrency", type=positive_int,
                   help="cap on requests in flight (default: none, pure open loop)")
    p.add_argument("--model", help="model name sent in requests (default: the first of /v1/models)")
    p.add_argument("--vocab", type=positive_int, help="vocabulary size for token-id prompts (default: from "
                                                      "/v1/models, else ids 100..511)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed for the prompt token ids")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def summary(result) -> dict:
    import numpy as np
    df = result.records
    ok = df[df["status"] == "ok"] if len(df) else df
    tbt = np.concatenate([np.diff(t) for t in ok["token_times"] if len(t) > 1]) if len(ok) else np.array([])
    pct = lambda s, q: float(np.percentile(s, q)) if len(s) else None  # noqa: E731
    return {"run_id": result.run_id, "scheduled": result.num_scheduled, "sent": int(len(df)),
            "interrupted": result.interrupted, "status": result.status_counts(), "wall_s": round(result.wall_s, 3),
            "ttft_p50_s": pct(ok["ttft_s"].dropna(), 50) if len(ok) else None,
            "ttft_p99_s": pct(ok["ttft_s"].dropna(), 99) if len(ok) else None,
            "tbt_p50_s": pct(tbt, 50), "tbt_p99_s": pct(tbt, 99),
            "send_lag_p50_s": pct(df["send_lag_s"], 50) if len(df) else None,
            "send_lag_p99_s": pct(df["send_lag_s"], 99) if len(df) else None}


def text_lines(out: dict) -> list[str]:
    """The summary for people: times as `ttft_p50  9.4 ms`, the status as `ok 298, http_429 2`."""
    lines = []
    for key, val in out.items():
        if key == "status":
            val = ", ".join(f"{k} {n}" for k, n in val.items()) or "none"
        elif key == "wall_s":
            key, val = "wall", f"{val:.2f} s"
        elif key.endswith("_s"):
            key, val = key[:-2], "n/a" if val is None else f"{val * 1000:.1f} ms"
        lines.append(f"{key:<16} {val}")
    return lines


def run(args) -> int:
    from gpuprobe.errors import UserError
    from gpuprobe.store import Store
    from gpuprobe.workloads.loading import load_workload
    from gpuprobe.workloads.replay import replay

    with Store.open(args.store) as store:
        df = load_workload(store, args.workload)
        if not len(df):
            raise UserError(f"--workload: workload {args.workload!r} has no requests")
        result = replay(df, args.target, speed=args.speed, token_scale=args.token_scale, limit=args.limit,
                        max_concurrency=args.max_concurrency, model=args.model, vocab=args.vocab, store=store,
                        workload=args.workload, progress=not args.no_progress, seed=args.seed)
    out = summary(result)
    if args.json:
        print(json.dumps(out))
    else:
        print("\n".join(text_lines(out)))
    if result.interrupted:
        return 130
    if len(result.records) and not (result.records["status"] == "ok").any():
        first = result.records["error"].dropna()
        why = f": {first.iloc[0]}" if len(first) else ""
        print(f"gpuprobe replay: failed: none of {len(result.records)} requests to {args.target} "
              f"succeeded (recorded as run {result.run_id}){why}", file=sys.stderr)
        return 1
    return 0
