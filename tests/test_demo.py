"""`gpuprobe demo --no-dashboard` (what `make demo` runs, less the dashboard) runs every stage
and its outputs are real: the --quick form (tiny model, fewer requests) keeps the test short."""
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

STAGES = ("import the bundled", "start the reference server", "replay the first", "profile the running",
          "forecast", "recommend a layout", "validate:", "apply the recommendation", "write the report",
          "where everything is")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One quick demo run for this file's tests: (store path, the finished process)."""
    db = tmp_path_factory.mktemp("demo") / "gpuprobe.db"
    out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "demo", "--quick", "--no-dashboard",
                          "--store", str(db)], capture_output=True, text=True, timeout=580)
    return db, out


@pytest.mark.timeout(600)
def test_demo_quick_runs_every_stage_and_leaves_its_outputs(demo):
    db, out = demo
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    for title in STAGES:
        assert f"== {title}" in text, title
    # every stage ran (exit 0 already says none failed): no stage said it was skipped
    assert [ln for ln in text.splitlines() if ln.startswith("  skipped: ")] == []
    assert "requests       19,366" in text  # azure-conv imported whole
    assert "time plan on an idle 2-core machine" in text.split("== import")[0]  # said before the work
    table = text[text.index("where the time went:"):]  # each stage's plan, wall and CPU seconds
    for key in ("import", "serve", "replay", "profile", "forecast", "recommend", "validate", "apply",
                "report", "total"):
        assert re.search(rf"^\s+{key}\s+\d+\s+[\d.]+\s+[\d.]+$", table, re.M), (key, table)
    profile = json.loads((db.parent / "profile.json").read_text())
    assert profile["name"] == "client-monolithic"  # profiled through the running server's API
    con = sqlite3.connect(db)
    # --quick serves the tiny model; profile --name kept the profile in the store under its name
    assert con.execute("SELECT name FROM profiles").fetchall() == [("demo-tiny",)]
    replayed = con.execute("SELECT COUNT(*) FROM requests WHERE source = 'replay' AND status = 'ok' "
                           "AND workload = 'azure-conv'").fetchone()[0]
    assert replayed == 16  # the whole replayed slice answered
    scraped = con.execute("SELECT COUNT(*) FROM samples JOIN series ON series.id = samples.series_id "
                          "WHERE series.source = 'engine' AND series.metric = 'scrape_up'").fetchone()[0]
    assert scraped >= 1  # the agent beside the server scraped its /metrics into the store
    rec = con.execute("SELECT pk, layout, applied_s, applied_target FROM recommendations").fetchall()
    assert len(rec) == 1 and rec[0][2] is not None  # recommended, then applied live
    assert rec[0][3] in text  # to the demo's own server, whose URL the summary prints
    assert f"decision         Run {rec[0][1]}" in text
    assert con.execute("SELECT COUNT(*) FROM validations").fetchone()[0] == 1  # validate kept its result
    assert (db.parent / "report.html").stat().st_size > 10_000
    assert (db.parent / "report.pdf").read_bytes()[:5] == b"%PDF-"
    # validate ran first, on the slice recommend then weighed, and the answer says what it measured
    body = json.loads(con.execute("SELECT body FROM recommendations").fetchone()[0])
    assert any(r["text"].startswith("last validate (azure-conv") for r in body["reasons"])
    first = " ".join(subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(db.parent / "report.pdf"), "-"],
                                    capture_output=True, text=True).stdout.split())
    assert body["decision"][:80] in first and "Decided on the first 16 requests of azure-conv" in first
    for said in ("the best other layout", "per million output tokens", "Main risks",
                 "What to do next", "the last validate on azure-conv"):
        assert said in first, (said, first)
    assert not re.search(r"--[a-z]|gpuprobe [a-z]+ ", first), first  # no flag, no command on page one
    assert f"report (PDF)     {db.parent / 'report.pdf'}" in text
    actors = [r[0] for r in con.execute("SELECT actor FROM layout_events ORDER BY ts_s")]
    applied = text.split("== apply")[1].split("\n== ")[0]
    if "already runs" in applied:  # recommended what the server ran: marked applied, not switched
        assert actors == ["startup"] and rec[0][1] == "monolithic", (actors, applied)
    else:
        assert actors[-1] == "gpuprobe-apply" and "now runs" in applied, (actors, applied)


@pytest.mark.timeout(600)  # the demo's run, when this test is run alone
def test_every_dashboard_page_shows_the_demo_run(demo):
    from dashboard_demo_check import check_every_page
    db, out = demo
    assert out.returncode == 0, out.stdout[-2000:]
    # the layout the server runs since apply (its start's, where apply found nothing to switch)
    (running,) = sqlite3.connect(db).execute("SELECT to_layout FROM layout_events "
                                             "ORDER BY ts_s DESC LIMIT 1").fetchone()
    check_every_page(db, running)


DECISION = '[data-testid="gpuprobe-decision"]'


@pytest.mark.timeout(600)
def test_pages_say_recommend_json_answer_and_warn_after_a_switch_by_hand(demo, tmp_path):
    """In Chromium on the demo's store: Overview and Recommend show recommend --json's decision
    sentence, the margin over the best other layout, confidence with its reason, $ per million
    tokens and the validate evidence; after the server is switched by hand, both warn of drift.
    Runs last: it adds a recommendation and a server to the demo's store."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_dashboard_browser import CHROMIUM, start_dashboard, wait_healthy

    from gpuprobe.deploy.admin_client import AdminClient
    from gpuprobe.deploy.apply import apply_recommendation
    from gpuprobe.decide.recommendation import latest_recommendation
    from gpuprobe.demo.common import QUICK
    from gpuprobe.demo.stages import recommend_argv
    from gpuprobe.server.kv_transfer import free_port
    from gpuprobe.server.launch import start_server
    from gpuprobe.store import Store
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    db, out = demo
    assert out.returncode == 0, out.stdout[-2000:]
    with Store.open(db) as store:
        first = latest_recommendation(store)  # the demo's, applied: the server starts in its layout
    d = first.deployment
    port = free_port("127.0.0.1")
    dash = start_dashboard(db, port, tmp_path / "dashboard.log")
    # recommend, the dashboard and the server start at once (each its own process)
    ask = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "recommend", "--store", str(db), "--json",
                            *(str(a) for a in recommend_argv(QUICK, db.parent / "profile.json"))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    token = "demo-drift-token"
    try:
        with start_server("tiny", d.layout, store=str(db), kv_cache_mb=16, log_path=str(tmp_path / "serve.log"),
                          prefill_share=d.prefill_share, chunked_prefill_tokens=d.chunked_prefill_tokens,
                          env={"GPUPROBE_ADMIN_TOKEN": token, "GPUPROBE_KV_RING_MB": "0"}) as srv:
            said, err = ask.communicate(timeout=300)
            assert ask.returncode == 0, err[-2000:]
            answer = json.loads(said)
            with Store.open(db) as store:
                apply_recommendation(store, answer["id"], srv.url, token)
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, dash)
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1400, "height": 1600})
                for path in ("", "recommend"):
                    page.goto(f"{base}/{path}")
                    for said in (answer["decision"], "Margin over the best other layout", "the best other layout, ",
                                 answer["confidence"]["basis"], "$ per million output tokens",
                                 "Evidence: the last validate on azure-conv"):
                        page.get_by_text(said).first.wait_for(timeout=60_000)  # each part drawn
                    assert page.locator(DECISION).first.inner_text().strip() == answer["decision"], path
                    assert page.get_by_text("Drift:").count() == 0, path
                # by hand: another layout than the one applied, as an operator would switch it
                other = {"layout": "intra", "prefill_share": 0.5} if d.layout != "intra" else {"layout": "monolithic"}
                AdminClient(srv.url, token).switch(other, actor="admin", reason="by hand")
                _wait_for_event(db, "admin")  # the server's telemetry thread writes it
                for path in ("", "recommend"):
                    page.goto(f"{base}/{path}")
                    page.get_by_text("Drift:").first.wait_for(timeout=30_000)
                    assert f"runs {other['layout']}" in page.get_by_text("Drift:").first.inner_text()
                browser.close()
    finally:
        ask.kill()
        dash.terminate()
        dash.wait(20)


def _wait_for_event(db, actor: str, timeout_s: float = 60.0) -> None:
    import time

    from gpuprobe.store import Store
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Store.open(db, read_only=True) as store:
            if (store.layout_events()["actor"] == actor).any():
                return
        time.sleep(0.2)
    raise AssertionError(f"no layout event by {actor} in the store after {timeout_s:.0f} s")
