"""`gpuprobe replay`: send a workload to a server open loop and record client-side timings."""
from __future__ import annotations

import json
import sys

NAME = "replay"
HELP = "replay a workload against an OpenAI-compatible server (open loop) and record TTFT and token times"


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, help="workload name in the store, or a trace file")
    p.add_argument("--target", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--speed", type=float, default=1.0, help="time compression: 2 sends twice as fast")
    p.add_argument("--token-scale", type=float, default=1.0, help="scale prompt and output lengths (min 1 token)")
    p.add_argument("--limit", type=int, help="replay only the first N requests")
    p.add_argument("--max-concurrency", type=int, help="cap on requests in flight (default: none, pure open loop)")
    p.add_argument("--model", help="model name sent in requests (default: the first of /v1/models)")
    p.add_argument("--vocab", type=int, help="vocabulary size for token-id prompts (default: from /v1/models, "
                                             "else ids 100..511)")
    p.add_argument("--seed", type=int, default=0, help="seed for the prompt token ids")
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


def _fmt(v) -> str:
    return f"{v * 1000:.1f} ms" if isinstance(v, float) else str(v)


def run(args) -> int:
    from gpuprobe.errors import UserError
    from gpuprobe.store import Store
    from gpuprobe.workloads.loading import load_workload
    from gpuprobe.workloads.replay import replay

    if args.speed <= 0 or args.token_scale <= 0:
        raise UserError("--speed and --token-scale must be more than 0")
    if args.limit is not None and args.limit < 1 or args.max_concurrency is not None and args.max_concurrency < 1:
        raise UserError("--limit and --max-concurrency must be at least 1")
    if not args.target.startswith(("http://", "https://")):
        raise UserError(f"--target: {args.target!r} is not an http:// or https:// URL")
    with Store.open(args.store) as store:
        df = load_workload(store, args.workload)
        result = replay(df, args.target, speed=args.speed, token_scale=args.token_scale, limit=args.limit,
                        max_concurrency=args.max_concurrency, model=args.model, vocab=args.vocab, store=store,
                        workload=args.workload, progress=not args.no_progress, seed=args.seed)
    out = summary(result)
    if args.json:
        print(json.dumps(out))
    else:
        for key, val in out.items():
            print(f"{key:<16} {_fmt(val) if key.endswith('_s') and key != 'wall_s' else val}")
    if result.interrupted:
        return 130
    if len(result.records) and not (result.records["status"] == "ok").any():
        first = result.records["error"].dropna()
        why = f": {first.iloc[0]}" if len(first) else ""
        print(f"gpuprobe replay: failed: none of {len(result.records)} requests to {args.target} "
              f"succeeded (recorded as run {result.run_id}){why}", file=sys.stderr)
        return 1
    return 0
