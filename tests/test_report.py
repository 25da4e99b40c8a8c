"""The management report from a real store: a recommendation computed by `recommend`, a
forecast, a validate result, served requests with GPU counters beside them and engine steps.
The PDF is printed by Debian's chromium and read back with poppler (pdftotext, pdfimages,
pdftoppm); the HTML opens in chromium through Playwright with no console error."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from gpuprobe.decide.decision import DecisionOptions, run_decision
from gpuprobe.decide.slo import parse_slo
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.store import Sample, Store

CHROMIUM, PDFTOTEXT = shutil.which("chromium"), shutil.which("pdftotext")
needs_pdf_tools = pytest.mark.skipif(not (CHROMIUM and PDFTOTEXT), reason="needs Debian's chromium and "
                                     "poppler-utils (make test installs them when run as root)")
T0 = 1_800_000_000.0


def _cli(store, *args, env=None):
    return subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(store), *args],
                          capture_output=True, text=True, env=env)


def _workload(n=300, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.5, n)),
                         "prompt_tokens": rng.integers(200, 3000, n), "output_tokens": rng.integers(20, 400, n)})


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "s.db"
    wl = _workload()
    with Store.open(path) as store:
        store.save_workload("chat", wl, source="synthetic")
        rec = run_decision(wl, roofline_profile("llama3-8b", "h200"), parse_slo("chat"),
                           DecisionOptions(max_devices=2, cost_per_device_hour=3.5), store,
                           workload_name="chat")
        rid = rec.id
        rows = [{"created_s": T0, "workload": "chat", "model": "ets", "forecast_id": "f1", "as_of_s": 120.0,
                 "bucket_s": 10.0, "horizon_s": 30.0, "metric": m, "target_s": 120.0 + 10 * k, "value": v,
                 "lo80": v * 0.8, "hi80": v * 1.2, "lo95": v * 0.6, "hi95": v * 1.4}
                for m, v in (("prefill_tokens_per_s", 3000.0), ("decode_tokens_per_s", 400.0),
                             ("requests_per_s", 2.0)) for k in range(3)]
        store.insert_forecasts(rows)
        store.insert_validation({"workload": "chat", "best_measured": "monolithic", "best_predicted": "monolithic",
                                 "bar_met": 1, "body": {"rows": [
                                     {"layout": "monolithic", "metric": "ttft_p50_s", "predicted": 0.05,
                                      "measured": 0.055, "rel_error": -0.09},
                                     {"layout": "monolithic", "metric": "tbt_p50_s", "predicted": 0.02,
                                      "measured": 0.021, "rel_error": -0.05}],
                                     "summary": {"monolithic": {"median_abs_rel_error_p50": 0.07}}}})
        # served requests alternating prefill-heavy and decode-heavy 10 s buckets, counters beside them
        reqs, samples = [], []
        for b in range(30):
            heavy = b % 2 == 0
            for i in range(3):
                reqs.append({"source": "server", "request_id": f"r{b}-{i}", "arrival_s": T0 + 10 * b + i,
                             "prompt_tokens": 3000 if heavy else 100, "output_tokens": 20 if heavy else 500,
                             "status": "ok"})
            samples += [Sample(T0 + 10 * b + s, "h", "gpm", "gpu0", "sm_util_pct", 90.0 if heavy else 40.0)
                        for s in range(0, 10, 2)]
        store.insert_requests(reqs)
        store.insert_samples(samples)
        store.insert_steps([{"role": "mixed", "start_s": T0 + k, "duration_s": 0.030 if k % 2 else 0.010,
                             "num_decode_seqs": 8, "num_prefill_tokens": 500 if k % 2 else 0} for k in range(40)])
    return path, rid, rec


@needs_pdf_tools
@pytest.mark.timeout(240)
def test_pdf_memo_options_and_images(filled, tmp_path):
    path, rid, rec = filled
    html, pdf = tmp_path / "r.html", tmp_path / "r.pdf"
    out = _cli(path, "report", "--workload", "chat", "--out", str(html), "--pdf", str(pdf), "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["partial"] is False and res["missing"] == [], res
    text = " ".join(subprocess.run([PDFTOTEXT, "-layout", str(pdf), "-"], capture_output=True,
                                   text=True).stdout.split())
    first = " ".join(subprocess.run([PDFTOTEXT, "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True,
                                    text=True).stdout.split())
    assert rec.decision[:60] in first  # page one: the sentence
    assert "Main risks" in first and "What to do next" in first and "Expected change" in first
    assert "±7% (model error)" in first and "median error at p50" in first  # uncertainty, said once
    assert "Confidence is low (" in first  # the risk says why, from the recommendation's basis
    # page one is for people: the gain over the best other layout and the cost in words, no
    # flag and no command (those are in the details section at the end)
    assert "the best other layout" in first and re.search(r"\$[\d.]+ per million output tokens", first)
    assert not re.search(r"--[a-z]|gpuprobe [a-z]+ ", first), first
    assert "gpuprobe plan --recommendation" in text  # the details section
    for c in rec.candidates:  # the options table: every candidate
        assert c["label"] in text
    assert "sm_util_pct 90.0 40.0" in text  # counters in prefill-heavy / decode-heavy periods
    assert "3.0x" in text  # interference: 30 ms with a prefill against 10 ms alone
    assert "CC-BY" not in text and "synthetic" in text  # provenance names the trace, no borrowed license
    images = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True).stdout
    assert len(images.strip().splitlines()) - 2 >= 4  # the plots, as images
    subprocess.run(["pdftoppm", "-png", "-r", "40", "-f", "1", "-l", "2", str(pdf), str(tmp_path / "p")], check=True)
    assert sorted(p.name for p in tmp_path.glob("p-*.png")) == ["p-1.png", "p-2.png"]


@needs_pdf_tools
@pytest.mark.timeout(120)
def test_html_opens_offline_without_console_errors(filled, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    path, rid, _ = filled
    html = tmp_path / "r.html"
    assert _cli(path, "report", "--workload", "chat", "--recommendation", str(rid), "--out", str(html)).returncode == 0
    assert not re.search(r'<script[^>]+src="https?://', html.read_text())  # plotly.js embedded: opens offline
    errors = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(html.as_uri())
        page.wait_for_selector(".plotly .main-svg", timeout=30_000)
        assert page.locator(".js-plotly-plot").count() >= 4
        browser.close()
    assert errors == []


def test_partial_report_invents_nothing_and_no_chromium_is_one_line(tmp_path):
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        store.save_workload("bare", _workload(50, seed=1))
    html = tmp_path / "r.html"
    out = _cli(path, "report", "--workload", "bare", "--out", str(html))
    assert out.returncode == 0, out.stderr
    assert "partial: missing recommendation, forecast, validate run" in out.stdout
    page = html.read_text()
    assert "Partial report" in page and "gpuprobe recommend --workload bare" in page
    assert "Expected change" not in page and "$" not in re.sub(r"<script.*?</script>", "", page, flags=re.S)
    no_browser = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    out = _cli(path, "report", "--workload", "bare", "--out", str(html), "--pdf", str(tmp_path / "r.pdf"),
               env=no_browser)
    assert out.returncode == 1 and "apt-get install -y --no-install-recommends chromium" in out.stderr
    assert "Traceback" not in out.stderr and html.exists() and not (tmp_path / "r.pdf").exists()
    out = _cli(path, "report", "--workload", "bare", "--recommendation", "7", "--out", str(html))
    assert out.returncode == 2 and "no such recommendation" in out.stderr
