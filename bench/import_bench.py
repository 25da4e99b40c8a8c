"""Import speed: gpuprobe import rows/s beside pandas.read_csv rows/s of the same BurstGPT-sized
file, and peak RSS (bounded memory: it should not grow with --rows).

    .venv/bin/python bench/import_bench.py --rows 1000000
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def make_file(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.5, rows))
    req, resp = rng.integers(1, 4000, rows), rng.integers(0, 800, rows)
    with open(path, "w") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for i in range(0, rows, 100_000):
            sl = slice(i, i + 100_000)
            fh.writelines(f"{a:.3f},ChatGPT,{b},{c},{b + c},Conversation log\n"
                          for a, b, c in zip(t[sl].tolist(), req[sl].tolist(), resp[sl].tolist()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    from gpuprobe.store import Store
    from gpuprobe.workloads.pipeline import import_trace
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "burst.csv"
        make_file(path, args.rows)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with Store.open(Path(tmp) / "s.db") as store:
            t0 = time.perf_counter()
            r = import_trace(store, path, "b")
            t_import = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        import pandas as pd
        t0 = time.perf_counter()
        n = len(pd.read_csv(path))
        t_pd = time.perf_counter() - t0
    print(f"rows {args.rows:,} (imported {r.summary.requests:,}, dropped {sum(r.dropped.values()):,} failures)")
    print(f"gpuprobe import   {args.rows / t_import:12,.0f} rows/s  ({t_import:.2f} s, parse+check+SQLite write)")
    print(f"pandas.read_csv   {n / t_pd:12,.0f} rows/s  ({t_pd:.2f} s, parse only)")
    print(f"ratio import/read_csv {t_pd / t_import:.3f}")
    print(f"peak RSS before import {rss0:.0f} MiB, after import {rss1:.0f} MiB (before pandas)")


if __name__ == "__main__":
    main()
