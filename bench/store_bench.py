"""Store speed: batched ingest vs row-by-row, and a downsampled read of 24 h of 10 Hz samples.

Prints ratios against a baseline measured in the same run (this machine is noisy).
Targets (issue 2): batched ingest >= 200,000 samples/s; the 2,000-point read <= 200 ms.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpuprobe.store import Sample, Store

T0 = 1_700_000_000.0


def _rows(n: int, metric: str, t0: float = T0, dt: float = 0.1) -> list[Sample]:
    return [Sample(t0 + i * dt, "bench", "nvml", "gpu0", metric, float(i % 100)) for i in range(n)]


def bench_ingest(store: Store, n_batched: int, n_rowwise: int) -> tuple[float, float]:
    rows = _rows(n_batched, "sm_util_pct")
    t = time.perf_counter()
    for i in range(0, n_batched, 10_000):  # the agent flushes in batches of this order
        store.insert_samples(rows[i:i + 10_000])
    batched = n_batched / (time.perf_counter() - t)
    slow = _rows(n_rowwise, "power_w")
    t = time.perf_counter()
    store.insert_sample_rows_slowly(slow)
    rowwise = n_rowwise / (time.perf_counter() - t)
    return batched, rowwise


def bench_read(store: Store, repeats: int = 5) -> tuple[float, float]:
    day = 86_400.0
    store.insert_samples(_rows(int(day * 10), "dram_bw_util_pct"))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        store.downsample("dram_bw_util_pct", T0, T0 + day, max_points=2000)
        times.append(time.perf_counter() - t)
    raw = time.perf_counter()
    store.samples("dram_bw_util_pct", T0, T0 + day)
    raw = time.perf_counter() - raw
    return statistics.median(times), raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=500_000)
    ap.add_argument("--rowwise", type=int, default=5_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "bench.db") as store:
        batched, rowwise = bench_ingest(store, args.samples, args.rowwise)
        print(f"ingest batched : {batched:12,.0f} samples/s  (target >= 200,000)")
        print(f"ingest row-wise: {rowwise:12,.0f} samples/s  (baseline, same run)")
        print(f"ratio batched / row-wise: {batched / rowwise:.1f}x")
        ds, raw = bench_read(store)
        print(f"24 h of 10 Hz (864,000 samples) -> 2,000 points: {ds * 1000:.1f} ms median (target <= 200 ms)")
        print(f"same range read raw into pandas: {raw * 1000:.0f} ms  (baseline; ratio {raw / ds:.0f}x)")


if __name__ == "__main__":
    main()
