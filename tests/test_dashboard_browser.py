"""The dashboard in a real browser: Playwright drives Debian's chromium against `gpuprobe
dashboard` over the store a running reference server writes. Every page loads without an
exception element, the charts are drawn, Apply with a wrong token changes nothing and with
the right one switches the server (read back through its admin API), and the Live page then
marks the switch. Screenshots of each page go to the test's tmp folder. One server, one
dashboard process."""
import json
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from dashboard_fill import fill
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.server.launch import start_server
from gpuprobe.store import Store

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
              pytest.mark.timeout(300)]  # a loaded 2-core VM: the switch spawns two workers
TOKEN = "dashboard-test-token"
# Live first: a fresh app's first URL naming a page must still run app.py's navigation
PAGES = (("live", "Live", 1), ("", "Overview", 1), ("workload", "Workload", 6), ("accuracy", "Accuracy", 1),
         ("forecast", "Forecast", 2), ("recommend", "Recommend", 1), ("reports", "Reports", 0))


# The page's documents: its own and its same-origin frames (Overview and Live draw their
# charts in a frame with plotly.js's basic bundle, dashboard/fast_chart.py).
DOCS = """const docs = () => [document, ...[...document.querySelectorAll('iframe')]
    .map(f => { try { return f.contentDocument; } catch (e) { return null; } }).filter(Boolean)];
const all = sel => docs().flatMap(d => [...d.querySelectorAll(sel)]);"""

# The drawn figure's own layout: at least n dashed lines per panel (y axis).
SWITCHES_ON_EVERY_PANEL = "n => {" + DOCS + """
    const gd = all('.js-plotly-plot')[0];
    if (!gd || !gd.layout) return false;
    const panels = Object.keys(gd.layout).filter(k => k.startsWith('yaxis')).length;
    const lines = (gd.layout.shapes || []).filter(s => s.line && s.line.dash === 'dash').length;
    return panels > 0 && lines >= n * panels && gd.querySelectorAll('.shapelayer path').length >= lines;
}"""
CHARTS_DRAWN = "n => {" + DOCS + """
    return all('.js-plotly-plot').length >= n && all('.js-plotly-plot .scatterlayer, .js-plotly-plot .barlayer').length > 0;
}"""
TRACES = "() => {" + DOCS + " return all('.js-plotly-plot .trace').length; }"


def start_dashboard(store: Path, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "dashboard", "--store", str(store),
                             "--port", str(port)], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "gpuprobe dashboard exited"
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"dashboard not up after {timeout_s} s")


def admin_layout(url: str) -> dict:
    req = urllib.request.Request(url + "/admin/layout", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def complete(url: str, n: int) -> None:
    for i in range(n):
        body = json.dumps({"prompt": f"hello {i}", "max_tokens": 8}).encode()
        urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=body), timeout=60).read()


def visit(page, base: str, path: str, title: str, num_charts: int, shots: Path) -> None:
    page.goto(f"{base}/{path}")
    page.get_by_role("heading", name=title, exact=False).first.wait_for(timeout=30_000)
    if num_charts:
        page.wait_for_function(CHARTS_DRAWN, arg=num_charts, timeout=30_000)
    else:
        page.wait_for_timeout(800)  # let the script finish
    page.get_by_role("link", name="Recommend", exact=True).wait_for(timeout=30_000)  # app.py's titles
    page.screenshot(path=str(shots / f"{path or 'overview'}.png"))
    assert page.locator('[data-testid="stException"]').count() == 0, path
    drawn = page.evaluate(TRACES)
    assert (drawn > 0) == (num_charts > 0), (path, drawn)


def test_every_page_in_chromium_and_apply_switches_the_server(tmp_path):
    store = tmp_path / "live.db"
    fill(store, requests=False, switch=False, t0=time.time() - 600).close()  # counters of the last minutes
    port = free_port("127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    dash = start_dashboard(store, port, tmp_path / "dashboard.log")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    # The browser works in a thread while this one starts the server (torch, a worker: the
    # slow part); the server must be started here, as it dies with the thread that started it.
    server_url, failures = queue.Queue(), []
    browsing = threading.Thread(target=browse, args=(base, dash, shots, server_url, failures, store))
    browsing.start()
    try:
        # a small KV cache and no shared ring: the workers start (and Apply's switch ends) sooner
        with start_server("tiny", "monolithic", store=str(store), kv_cache_mb=16, log_path=str(tmp_path / "serve.log"),
                          env={"GPUPROBE_ADMIN_TOKEN": TOKEN, "GPUPROBE_KV_RING_MB": "0"}) as srv:
            complete(srv.url, 4)
            server_url.put(srv.url)
            browsing.join()  # its own waits each fail by name; pytest's timeout bounds the whole
    finally:
        server_url.put(None)
        browsing.join(30)
        dash.terminate()
        dash.wait(20)
    if failures:
        raise failures[0]
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(
        [f"{p or 'overview'}.png" for p, _, _ in PAGES] + ["apply-refused.png", "apply-done.png",
                                                            "live-after-apply.png"])


def browse(base: str, dash, shots: Path, server_url: queue.Queue, failures: list, store: Path) -> None:
    try:
        wait_healthy(base, dash)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            for path, title, charts in PAGES:
                visit(page, base, path, title, charts, shots)
            server = server_url.get(timeout=150)
            assert server, "the reference server did not start"
            apply_from_the_page(page, base, server, shots)
            visit(page, base, "live", "Live", 1, shots)
            # both switches the server made (its start, the dashboard's) are on every panel
            page.wait_for_function(SWITCHES_ON_EVERY_PANEL, arg=2, timeout=30_000)
            live = page.frame_locator('iframe[src*="plotly_basic"]').first  # the Live chart's frame
            live.get_by_text("monolithic -> intra").first.wait_for(timeout=30_000)
            page.screenshot(path=str(shots / "live-after-apply.png"))
            # new data reaches an open Live page by itself (it redraws every few seconds)
            with Store.open(store) as s:
                s.insert_layout_events([{"ts_s": time.time(), "from_layout": "intra", "to_layout": "cross",
                                         "actor": "test"}])
            live.get_by_text("intra -> cross").first.wait_for(timeout=20_000)
            browser.close()
    except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
        failures.append(exc)


def apply_from_the_page(page, base: str, server: str, shots: Path) -> None:
    page.goto(f"{base}/recommend")
    page.get_by_label("Server URL").fill(server)
    page.get_by_label("Admin token").fill("wrong-token")
    page.get_by_text("Yes, switch this server").click()
    page.get_by_role("button", name="Apply").click()
    page.get_by_text("Not applied").wait_for(timeout=30_000)
    assert "invalid admin token" in page.get_by_text("Not applied").inner_text()
    page.screenshot(path=str(shots / "apply-refused.png"))
    assert admin_layout(server)["layout"] == "monolithic"  # nothing changed

    page.get_by_label("Admin token").fill(TOKEN)
    page.get_by_role("button", name="Apply").click()
    page.get_by_text(re.compile(r"^Applied: ")).wait_for(timeout=90_000)
    page.screenshot(path=str(shots / "apply-done.png"))
    page.get_by_text(re.compile(r"^Applied$")).first.wait_for(timeout=30_000)  # the metric, redrawn
    assert page.get_by_text("not yet").count() == 0
    now = admin_layout(server)
    assert now["layout"] == "intra" and now["prefill_share"] == pytest.approx(0.7)
