"""Replay send-time error: requests at --rate req/s against a local fast server; p50/p99/max of
(actual send - scheduled send). Target: p99 under 5 ms at 200 req/s.

    .venv/bin/python bench/replay_bench.py --rate 200 --seconds 10
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    from fake_openai_server import FakeOpenAIServer
    from gpuprobe.workloads.replay import replay
    n = int(args.rate * args.seconds)
    df = pd.DataFrame({"arrival_s": np.arange(n) / args.rate, "prompt_tokens": 16, "output_tokens": 4})
    with FakeOpenAIServer(token_delay_s=0.0) as srv:
        r = replay(df, srv.url)
    lag_ms = r.records["send_lag_s"].to_numpy() * 1000
    print(f"{n} requests at {args.rate:.0f} req/s: status {r.status_counts()}")
    print(f"send-time error ms: p50 {np.percentile(lag_ms, 50):.2f}  p99 {np.percentile(lag_ms, 99):.2f}  "
          f"max {lag_ms.max():.2f}  (target p99 < 5 ms)")


if __name__ == "__main__":
    main()
