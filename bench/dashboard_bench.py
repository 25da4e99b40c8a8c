"""Dashboard speed: the Live page's first chart in a real browser on a day of 10 Hz samples for
8 GPUs, beside the same page on an empty store, measured in the same run.

    python bench/dashboard_bench.py [--hours 24] [--gpus 8] [--store /tmp/day.db] [--repeats 3]

Time = from Playwright's navigation to /live until the first plotly trace is in the DOM
(chromium at /usr/bin/chromium). "cold" is the first visit after the dashboard started (nothing
cached), "warm" the median of the next visits (Streamlit's cache, keyed on the data version).
Target (issue 39): the first chart within 3 s on the day of samples. A --store that already
holds the day is reused, so a rerun skips the ~minutes of writing it.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from gpuprobe.server.kv_transfer import free_port
from gpuprobe.store import Store

T0 = 1_700_000_000.0
# (source, metric, level): the GPU counters the Live page draws
GPU_METRICS = (("gpm", "sm_util_pct", 60.0), ("gpm", "sm_occupancy_pct", 30.0), ("gpm", "dram_bw_util_pct", 70.0),
               ("gpm", "tensor_util_pct", 25.0), ("nvml", "mem_used_bytes", 6e10), ("nvml", "power_w", 450.0))
CHUNK = 500_000


def build(path: Path, hours: float, gpus: int, hz: float, say=print) -> int:
    """Write `hours` of `hz` samples of GPU_METRICS for `gpus` GPUs; returns rows written."""
    n = int(hours * 3600 * hz)
    ts = T0 + np.arange(n) / hz
    rng = np.random.default_rng(0)
    total, t = 0, time.perf_counter()
    with Store.open(path) as store:
        for g in range(gpus):
            for source, metric, level in GPU_METRICS:
                values = level * (1 + 0.1 * np.sin(ts / 3600) + 0.02 * rng.standard_normal(n))
                for i in range(0, n, CHUNK):
                    store.insert_samples(zip(ts[i:i + CHUNK].tolist(), _same("day", n, i), _same(source, n, i),
                                             _same(f"gpu{g}", n, i), _same(metric, n, i),
                                             values[i:i + CHUNK].tolist()))
                total += n
                say(f"  gpu{g} {metric}: {total:,} rows, {total / (time.perf_counter() - t):,.0f} rows/s")
        store.insert_layout_events([{"ts_s": T0 + hours * 3600 * f, "to_layout": lay, "from_layout": prev}
                                    for f, prev, lay in ((0.3, "monolithic", "intra"), (0.9, "intra", "cross"))])
    return total


def _same(value: str, n: int, i: int):
    return [value] * min(CHUNK, n - i)


def rows_in(path: Path) -> int:
    if not path.exists():
        return 0
    with Store.open(path, read_only=True) as store:
        return store._conn.execute("SELECT MAX(rowid) FROM samples").fetchone()[0] or 0


def dashboard(store: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "dashboard", "--store", str(store),
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
            return proc
        except OSError:
            time.sleep(0.2)
    raise SystemExit("dashboard did not start")


def first_chart_s(page, url: str, empty: bool) -> float:
    t = time.perf_counter()
    page.goto(url)
    if empty:  # an empty store's Live page has no chart: its "what is missing" line is its first content
        page.get_by_text("No samples and no requests").wait_for(timeout=60_000)
    else:
        page.locator(".js-plotly-plot .scatterlayer .trace").first.wait_for(timeout=60_000)
    return time.perf_counter() - t


def measure(store: Path, repeats: int, empty: bool) -> tuple[float, float]:
    from playwright.sync_api import sync_playwright

    port = free_port("127.0.0.1")
    proc = dashboard(store, port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/")  # the app's own start-up, not the Live page's:
            page.get_by_role("heading", name="Overview").wait_for(timeout=60_000)
            if not empty:  # the Overview's chart of the last hour (plotly.js parsed once per browser)
                page.locator(".js-plotly-plot .scatterlayer .trace").first.wait_for(timeout=60_000)
            opened = time.perf_counter() - t
            url = f"http://127.0.0.1:{port}/live"
            cold = first_chart_s(page, url, empty)
            warm = [first_chart_s(page, url, empty) for _ in range(repeats)]
            clicks = []  # as a user gets there: Overview, then Live in the sidebar (no reload)
            for _ in range(repeats):
                page.goto(f"http://127.0.0.1:{port}/")
                page.get_by_role("heading", name="Overview").wait_for(timeout=60_000)
                page.wait_for_timeout(500)
                t = time.perf_counter()
                page.get_by_role("link", name="Live").click()
                page.get_by_role("heading", name="Live").wait_for(timeout=60_000)
                (page.get_by_text("No samples and no requests") if empty else
                 page.locator(".js-plotly-plot .scatterlayer .trace").first).wait_for(timeout=60_000)
                clicks.append(time.perf_counter() - t)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(20)
    return opened, cold, statistics.median(warm), statistics.median(clicks)


def query_times(path: Path) -> dict[str, float]:
    """The Live page's counter reads alone (no browser), per window."""
    from gpuprobe.dashboard import queries
    out = {}
    with Store.open(path, read_only=True) as store:
        first, last = queries.span(store)
        for name, width in (("1 h", 3600.0), ("24 h", 86400.0)):
            t = time.perf_counter()
            points = min(2000, int(width / 10))  # as the Live page asks: 10 s buckets from 30 min up
            panels = queries.counter_panels(store, max(first, last - width), last, points, None, ())
            out[name] = time.perf_counter() - t
            out[f"{name} points/series"] = max(len(tr["ts_s"]) for p in panels for tr in p["traces"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--store", type=Path, default=Path(tempfile.gettempdir()) / "gpuprobe-dashboard-bench.db")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    want = int(args.hours * 3600 * args.hz) * args.gpus * len(GPU_METRICS)
    if rows_in(args.store) != want:
        args.store.unlink(missing_ok=True)
        print(f"writing {want:,} samples to {args.store} ...", flush=True)
        build(args.store, args.hours, args.gpus, args.hz, say=lambda m: print(m, flush=True))
    else:
        print(f"reusing {args.store} ({want:,} samples)")
    print(f"store size {args.store.stat().st_size / 2**30:.2f} GiB")
    q = query_times(args.store)
    print(f"counter reads alone: 1 h window {q['1 h'] * 1e3:,.0f} ms ({q['1 h points/series']:,} points a series), "
          f"24 h window {q['24 h'] * 1e3:,.0f} ms ({q['24 h points/series']:,})")
    with tempfile.TemporaryDirectory() as tmp:
        empty, small = Path(tmp) / "empty.db", Path(tmp) / "small.db"
        Store.open(empty).close()
        build(small, 0.1, 2, args.hz, say=lambda _: None)  # 6 minutes of 2 GPUs: what the chart costs without the volume
        e = measure(empty, args.repeats, empty=True)
        s = measure(small, args.repeats, empty=False)
    d = measure(args.store, args.repeats, empty=False)
    print("seconds to the Live page's first chart (empty store: its first content). open = the app's"
          " Overview with its chart, in a fresh browser; cold = then /live, nothing cached in the app;"
          " reload = /live again (median); click = Overview, then Live in the sidebar (median)")
    for name, (opened, cold, warm, click) in (("empty store (baseline)", e), ("6 min x 2 GPUs", s),
                                              (f"{args.hours:g} h x {args.gpus} GPUs", d)):
        print(f"  {name:<24} open {opened:5.2f}  cold {cold:5.2f}  reload {warm:5.2f}  click {click:5.2f}"
              f"   (cold {cold / e[1]:.1f}x, reload {warm / e[2]:.1f}x, click {click / e[3]:.1f}x the empty store)")
    print(f"target <= 3 s on the day of samples: cold {'met' if d[1] <= 3 else 'NOT met'}, "
          f"reload {'met' if d[2] <= 3 else 'NOT met'}, click {'met' if d[3] <= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
