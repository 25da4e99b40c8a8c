"""`gpuprobe autopilot` as a process: an unreachable target is logged and retried each
interval (no traceback; its lease asked for again each time), SIGTERM stops it between
decisions, bad flags are one line and exit 2, and `autopilot log` prints the audit log (text
and JSON). No server needed: the target is a port nothing listens on. One autopilot per
server, by the server's lease: test_autopilot_lease.py."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from cli_run import run_cli as _main
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.store import Store

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def setup(tmp_path):
    prof = tmp_path / "l40s.json"
    prof.write_text(roofline_profile("llama3-8b", "l40s").dumps())
    db = tmp_path / "ap.db"
    Store.open(db).close()
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    return str(db), str(prof), url


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _wait_decisions(db: str, n: int, timeout_s: float = 60.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with Store.open(db, read_only=True) as s:
            d = s.decisions()
        if len(d) >= n:
            return d
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} decisions after {timeout_s} s")


def test_unreachable_target_and_sigterm(setup):
    db, prof, url = setup
    p = _cli("--store", db, "autopilot", "--target", url, "--profile", prof, "--interval", "0.3s")
    try:
        d = _wait_decisions(db, 2)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "Traceback" not in err and "autopilot stopped after" in out
    assert (d.action == "no-target").all() and d.reason.str.contains("unreachable").all()
    assert d.reason.str.contains("retried next interval").all()
    with Store.open(db, read_only=True) as s:
        decisions = s.decisions(url)
    # the last decision's outcome is filled in (partial: it was stopped)
    assert json.loads(decisions.outcome.iloc[-1])["partial"] is True


def test_bad_flags_one_line_exit_2(setup, capsys):
    db, prof, url = setup
    cases = [
        (["--target", url, "--profile", prof, "--interval", "0s"], "--interval"),
        (["--target", url], "--profile"),
        (["--profile", prof], "--target"),
        (["--target", url, "--profile", prof, "--slo", "ttft_p99=fast"], "--slo"),
        (["--target", url, "--profile", prof, "--slo", "bogus=1"], "--slo"),
        (["--target", url, "--profile", prof, "--min-dwell", "soon"], "--min-dwell"),
        (["--target", url, "--profile", str(prof) + ".missing"], ".missing"),
        (["--target", url, "--profile", prof, "--admin-token-file", "/nonexistent/tok"], "--admin-token-file"),
        (["--target", "not a url", "--profile", prof], "--target"),
        (["--target", url, "--profile", prof, "--min-gain", "-1"], "--min-gain"),
    ]
    for args, needle in cases:
        rc, out, err = _main(capsys, "--store", db, "autopilot", *args)
        assert rc == 2, (args, err)
        assert needle in err and len(err.strip().splitlines()) == 1, (args, err)


def test_log_text_and_json(setup, capsys):
    db, prof, url = setup
    rc, out, err = _main(capsys, "--store", db, "autopilot", "--target", url, "--profile", prof,
                         "--interval", "0.2s", "--for", "0.5s")
    assert rc == 0 and "autopilot stopped after" in out, err
    rc, out, err = _main(capsys, "--store", db, "autopilot", "log", "--json")
    recs = json.loads(out)
    assert rc == 0 and recs and recs[0]["target"] == url and recs[0]["action"] == "no-target"
    assert isinstance(recs[0]["forecast"], dict) and recs[-1]["outcome"]["partial"] is True
    rc, out, err = _main(capsys, "--store", db, "autopilot", "log")
    assert rc == 0 and f"{url} ? -> no-target: unreachable" in out, out
