"""Dashboard speed: the Live page's first chart in a real browser on a day of 10 Hz samples for
8 GPUs, beside the same page on an empty store, measured in the same run.

    python bench/dashboard_bench.py [--hours 24] [--gpus 8] [--store /tmp/day.db] [--repeats 3]

Time = from Playwright's navigation to /live until the first plotly trace is drawn (chromium at
/usr/bin/chromium). The bar's figure is "fresh": a new browser (nothing cached, no JS parsed)
straight to /live, median of --repeats, once the app's reads are cached; "server cold" is the
first of them, right after the app started. Target (issue 39): within 3 s on the day of samples,
beside the empty store's figure. A --store that already holds the day is reused, so a rerun
skips the minutes of writing it. Run it on a quiet machine: contention decides these seconds.
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
CHROMIUM = "/usr/bin/chromium"


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
    deadline = time.monotonic() + 180  # a busy 2-core VM starts Streamlit in 10-60 s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
            return proc
        except OSError:
            time.sleep(0.2)
    raise SystemExit("dashboard did not start in 180 s")


# The first plotly trace drawn, in the page or in a same-origin frame (Overview and Live draw
# theirs in a frame with plotly.js's basic bundle: dashboard/fast_chart.py).
FIRST_TRACE = """() => [document, ...[...document.querySelectorAll('iframe')]
    .map(f => { try { return f.contentDocument; } catch (e) { return null; } }).filter(Boolean)]
    .some(d => d.querySelector('.js-plotly-plot .scatterlayer .trace'))"""
EMPTY_TEXT = "No samples and no requests"  # an empty store's Live page: its first content


def wait_first(page, empty: bool) -> None:
    if empty:
        page.get_by_text(EMPTY_TEXT).wait_for(timeout=120_000)
    else:
        page.wait_for_function(FIRST_TRACE, timeout=120_000, polling=50)


def fresh_s(pw, url: str, empty: bool) -> float:
    """A new browser (no cache, nothing parsed) straight to `url`: the bar's case."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t = time.perf_counter()
        page.goto(url)
        wait_first(page, empty)
        return time.perf_counter() - t
    finally:
        browser.close()


def measure(store: Path, repeats: int, empty: bool) -> dict[str, float]:
    """Seconds to the Live page's first chart: `server_cold` (a fresh browser, the app just
    started: nothing cached anywhere), `fresh` (median of fresh browsers once the app's reads
    are cached), `reload` (/live again in a browser that has it), `click` (Overview, then Live
    in the sidebar)."""
    from playwright.sync_api import sync_playwright

    port = free_port("127.0.0.1")
    proc = dashboard(store, port)
    base, url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/live"
    try:
        with sync_playwright() as pw:
            server_cold = fresh_s(pw, url, empty)
            fresh = [fresh_s(pw, url, empty) for _ in range(repeats)]
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            reload, clicks = [], []
            for _ in range(repeats + 1):
                t = time.perf_counter()
                page.goto(url)
                wait_first(page, empty)
                reload.append(time.perf_counter() - t)
            for _ in range(repeats):  # as a user gets there: Overview, then Live in the sidebar
                page.goto(base + "/")
                page.get_by_role("heading", name="Overview").wait_for(timeout=120_000)
                page.wait_for_timeout(500)
                t = time.perf_counter()
                page.get_by_role("link", name="Live").click()
                page.get_by_role("heading", name="Live").wait_for(timeout=120_000)
                wait_first(page, empty)
                clicks.append(time.perf_counter() - t)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(20)
    return {"server_cold": server_cold, "fresh": statistics.median(fresh),
            "reload": statistics.median(reload[1:]), "click": statistics.median(clicks)}


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
    print("seconds to the Live page's first chart (empty store: its first content). fresh = a new browser"
          " straight to /live (median; the bar's case), server cold = the first of those, the app just"
          " started; reload = /live again in the same browser; click = Overview, then Live in the sidebar")
    for name, r in (("empty store (baseline)", e), ("6 min x 2 GPUs", s), (f"{args.hours:g} h x {args.gpus} GPUs", d)):
        print(f"  {name:<24} fresh {r['fresh']:5.2f}  server cold {r['server_cold']:5.2f}  reload {r['reload']:5.2f}"
              f"  click {r['click']:5.2f}   (fresh {r['fresh'] / e['fresh']:.1f}x the empty store's)")
    print(f"target: a fresh browser's first chart within 3 s on the day of samples: {d['fresh']:.2f} s, "
          f"{'met' if d['fresh'] <= 3 else 'NOT met'} ({d['fresh'] / e['fresh']:.1f}x the empty store, "
          f"{d['fresh'] - e['fresh']:+.2f} s)")


if __name__ == "__main__":
    main()
