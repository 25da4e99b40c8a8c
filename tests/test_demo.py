"""`gpuprobe demo --no-dashboard` (what `make demo` runs, less the dashboard) runs every stage
and its outputs are real: the --quick form (tiny model, fewer requests) keeps the test short."""
import json
import re
import sqlite3
import subprocess
import sys

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
    assert f"report (PDF)     {db.parent / 'report.pdf'}" in text
    actors = [r[0] for r in con.execute("SELECT actor FROM layout_events ORDER BY ts_s")]
    assert actors[-1] == "gpuprobe-apply"


@pytest.mark.timeout(600)  # the demo's run, when this test is run alone
def test_every_dashboard_page_shows_the_demo_run(demo):
    from dashboard_demo_check import check_every_page
    db, out = demo
    assert out.returncode == 0, out.stdout[-2000:]
    applied = sqlite3.connect(db).execute("SELECT to_layout FROM layout_events WHERE actor = 'gpuprobe-apply' "
                                          "ORDER BY ts_s DESC LIMIT 1").fetchone()
    check_every_page(db, applied[0])
