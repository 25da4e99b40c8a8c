"""`gpuprobe apply` against a real reference server over real HTTP: the faults (wrong token,
unreachable server, a switch already in progress, unknown id) change nothing; a switch under
streaming load loses no request, the server records a layout event by gpuprobe-apply for the
recommendation, the recommendation is marked applied, and `check_recommendation` then compares
the prediction with what the server measured since, with the request count."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from test_server_api import stream_completion
from waiting import wait_for

from gpuprobe.cli.main import main
from gpuprobe.deploy.admin_client import AdminError
from gpuprobe.deploy.apply import apply_recommendation
from gpuprobe.deploy.check import check_recommendation, check_text
from gpuprobe.errors import UserError
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.server.launch import start_server
from gpuprobe.store import Store

TOKEN = "apply-token-5d1c"
pytestmark = pytest.mark.timeout(300)
PREDICTED = {"ttft_p50_s": 0.05, "ttft_p99_s": 0.2, "tbt_p50_s": 0.02, "tbt_p99_s": 0.08,
             "slo_attainment": 0.95, "max_goodput_rps_per_device": 12.0}


def _recommendation(store, layout: str, params: dict) -> int:
    return store.insert_recommendation({
        "workload": "apply-test", "layout": layout, "prefill_share": params.get("prefill_share"),
        "params": params, "slo": {"ttft_s": 2.0, "tbt_s": 0.2},
        "candidates": [{"layout": "monolithic", "params": {}, **PREDICTED, "ttft_p50_s": 9.0},
                       {"layout": layout, "params": params, **PREDICTED}],
        "reasons": [], "profile": "tiny-cpu"})


def _layout(url: str) -> dict:
    req = urllib.request.Request(url + "/admin/layout",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def _post_layout(url: str, body: dict, out: list) -> None:
    req = urllib.request.Request(url + "/admin/layout", data=json.dumps(body).encode(),
                                 method="POST", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out.append(json.load(r))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("apply")
    (tmp / "token").write_text(TOKEN)
    db = tmp / "s.db"
    srv = start_server("tiny", "monolithic", store=str(db), admin_token_file=str(tmp / "token"),
                       log_path=str(tmp / "log"), max_queue_wait="0")  # no 429 on a busy machine
    yield srv, db, tmp
    srv.stop()


def test_faults_change_nothing(server, capsys):
    srv, db, tmp = server
    with Store.open(db) as store:
        rid = _recommendation(store, "intra", {"prefill_share": 0.5})
        with pytest.raises(AdminError, match="refused the admin token"):
            apply_recommendation(store, rid, srv.url, "not-the-token")
        dead = f"http://127.0.0.1:{free_port('127.0.0.1')}"
        with pytest.raises(AdminError, match="cannot reach"):
            apply_recommendation(store, rid, dead, TOKEN)
        with pytest.raises(UserError, match="no such recommendation"):
            apply_recommendation(store, 9999, srv.url, TOKEN)
        # a switch already under way (someone else's): apply says so instead of queueing
        done: list = []
        other = threading.Thread(target=_post_layout,
                                 args=(srv.url, {"layout": "cross", "prefill_share": 0.5}, done))
        other.start()
        deadline = time.monotonic() + 60
        while not _layout(srv.url)["switching"]:
            assert time.monotonic() < deadline and other.is_alive(), "never saw the switch"
            time.sleep(0.01)
        with pytest.raises(AdminError, match="already in progress"):
            apply_recommendation(store, rid, srv.url, TOKEN)
        other.join(120)
        assert done and done[0]["status"] == "ok" and done[0]["actor"] == "admin"
        assert store.recommendation(rid)["applied_s"] is None
    now = _layout(srv.url)
    assert now["layout"] == "cross" and [h["actor"] for h in now["history"]] == ["startup", "admin"]
    # the server checks who asks: an empty actor is refused before any switch
    with pytest.raises(urllib.error.HTTPError) as bad:
        _post_layout(srv.url, {"layout": "intra", "actor": ""}, [])
    assert bad.value.code == 400 and b"actor" in bad.value.read()
    # the command line: exit 1 and one line for a fault, exit 2 for an unknown id
    (tmp / "bad").write_text("wrong")
    rc = main(["--store", str(db), "apply", "--recommendation", str(rid), "--target", srv.url,
               "--admin-token-file", str(tmp / "bad")])
    err = capsys.readouterr().err
    assert rc == 1 and "refused the admin token" in err and err.count("\n") == 1, err
    rc = main(["--store", str(db), "apply", "--recommendation", "9999", "--target", srv.url,
               "--admin-token-file", str(tmp / "token")])
    err = capsys.readouterr().err
    assert rc == 2 and "--recommendation 9999" in err and err.count("\n") == 1, err
    assert _layout(srv.url)["layout"] == "cross"
    with Store.open(db) as store:
        assert store.recommendation(rid)["applied_s"] is None
    # and with the right token the command switches and says so
    rc = main(["--store", str(db), "apply", "--recommendation", str(rid), "--target", srv.url,
               "--admin-token-file", str(tmp / "token")])
    out = capsys.readouterr().out
    assert rc == 0 and "now runs intra prefill_share=0.5" in out, out
    assert f"recommendation {rid} marked applied" in out
    assert _layout(srv.url)["history"][-1]["actor"] == "gpuprobe-apply"


async def _apply_under_load(url: str, db, rid: int) -> tuple[list, list, dict, list, list]:
    timeout = aiohttp.ClientTimeout(total=200)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        before = [([5 + i, 6, 7], 24 + i % 9) for i in range(12)]
        tasks = [asyncio.ensure_future(stream_completion(s, url, *j)) for j in before]
        await asyncio.sleep(0.3)  # the streams are running when the switch starts

        def apply() -> dict:
            with Store.open(db) as store:
                return apply_recommendation(store, rid, url, TOKEN)
        out = await asyncio.to_thread(apply)
        after = [([9, 8 + i], 6 + i % 5) for i in range(8)]
        results = await asyncio.gather(*tasks)
        later = await asyncio.gather(*(stream_completion(s, url, *j) for j in after))
    return before, results, out, after, later


def test_apply_under_streaming_load_then_check(server, capsys):
    srv, db, _ = server
    with Store.open(db) as store:
        rid = _recommendation(store, "monolithic", {"chunked_prefill": True,
                                                    "max_num_batched_tokens": 64,
                                                    "max_num_seqs": 32})
    before, results, out, after, later = asyncio.run(_apply_under_load(srv.url, db, rid))
    for (_, n), r in zip(before + after, results + later):
        # the tiny model's random bytes: a chunk waits for the bytes that complete a character
        assert r["error"] is None and r["done"] and r["usage"] == n and 1 <= r["chunks"] <= n \
            and r["empty"] == 0, (n, r)
    assert out["layout"] == "monolithic" and out["chunked_prefill_tokens"] == 64
    assert out["actor"] == "gpuprobe-apply" and out["reason"] == f"recommendation {rid}"
    assert any("max_num_seqs 32" in k for k in out["kept"])
    last = _layout(srv.url)["history"][-1]
    assert (last["actor"], last["to"], last["status"]) == ("gpuprobe-apply", "monolithic", "ok")
    deadline = time.monotonic() + 60  # the server's telemetry thread writes every 0.5 s
    while time.monotonic() < deadline:
        with Store.open(db) as store:
            if check_recommendation(store, rid)["num_requests"] >= len(after) and \
                    store.layout_events().iloc[-1]["actor"] == "gpuprobe-apply":
                break
        time.sleep(0.2)
    with Store.open(db) as store:
        rec = store.recommendation(rid)
        assert rec["applied_target"] == srv.url and rec["applied_s"] == pytest.approx(
            out["applied_s"])
        events = store.layout_events()
        ev = events.iloc[-1]
        assert (ev["actor"], ev["reason"], ev["to_layout"]) == (
            "gpuprobe-apply", f"recommendation {rid}", "monolithic")
        result = check_recommendation(store, rid)
    # only what arrived after the switch counts: the 8 requests sent once apply returned
    assert result["num_requests"] == len(after) and result["num_ok"] == len(after)
    rows = {r["metric"]: r for r in result["metrics"]}
    assert rows["ttft_p50_s"]["predicted"] == PREDICTED["ttft_p50_s"]  # the chosen candidate's
    assert all(rows[m]["measured"] is not None and rows[m]["measured"] > 0
               for m in ("ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s"))
    assert 0 <= rows["slo_attainment"]["measured"] <= 1
    text = check_text(result)
    assert f"{len(after)} requests measured since the switch" in text and "ttft_p99_s" in text


def test_applying_what_already_runs_switches_nothing(server, capsys):
    srv, db, tmp = server
    now = _layout(srv.url)  # whatever the tests before left running: asked for again
    params = ({"chunked_prefill_tokens": now["chunked_prefill_tokens"]} if now["layout"] == "monolithic"
              else {"prefill_share": now["prefill_share"]})
    with Store.open(db) as store:
        rid = _recommendation(store, now["layout"], params)
    rc = main(["--store", str(db), "apply", "--recommendation", str(rid), "--target", srv.url,
               "--admin-token-file", str(tmp / "token")])
    out = capsys.readouterr().out
    assert rc == 0 and f"already runs {now['layout']}" in out and "not switched" in out, out
    assert len(_layout(srv.url)["history"]) == len(now["history"])  # no switch, no worker restart
    with Store.open(db) as store:
        assert store.recommendation(rid)["applied_target"] == srv.url


def test_check_refuses_a_recommendation_never_applied(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        rid = _recommendation(store, "intra", {"prefill_share": 0.4})
        with pytest.raises(UserError, match="has not been applied"):
            check_recommendation(store, rid)
        store.mark_recommendation_applied(rid, "http://x:1", ts_s=time.time())
        result = check_recommendation(store, rid)
    assert result["num_requests"] == 0 and "no request has reached" in result["note"]
    assert [r["measured"] for r in result["metrics"]] == [None] * 5


def test_recommend_check_entry_point(tmp_path, capsys):
    """What `recommend --check ID` runs: one line for an unknown id, JSON with --json."""
    import argparse

    from gpuprobe.cli.commands._recommend_check import add_check_argument, run_check
    p = argparse.ArgumentParser()
    add_check_argument(p)
    p.add_argument("--json", action="store_true")
    db = tmp_path / "s.db"
    with Store.open(db) as store:
        rid = _recommendation(store, "cross", {"num_prefill": 1, "num_decode": 1})
        store.mark_recommendation_applied(rid, "http://x:1", ts_s=time.time())
    args = p.parse_args(["--check", str(rid), "--json"])
    args.store = str(db)
    assert run_check(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["id"] == rid and out["num_requests"] == 0
    assert {r["metric"] for r in out["metrics"]} >= {"ttft_p99_s", "slo_attainment"}
    args.check = 4242
    with pytest.raises(UserError, match="no such recommendation"):
        run_check(args)


def test_check_counts_only_the_switched_server_until_its_next_switch(tmp_path):
    """Two servers record into one store; the check takes the one whose layout event names the
    recommendation, from the switch until that server's next switch."""
    from gpuprobe.server.telemetry import request_record

    def req(run: str, rid: str, t0: float) -> dict:
        return request_record(run, "h", "tiny", "intra", rid, arrival_s=t0, prompt_tokens=4,
                              token_times_s=[t0 + 0.05, t0 + 0.07, t0 + 0.1], dispatch_s=t0,
                              prefill_start_s=t0, prefill_end_s=t0 + 0.04, kv_handoff_s=None,
                              kv_handoff_bytes=None, finish_s=t0 + 0.1, status="ok", error=None)
    with Store.open(tmp_path / "s.db") as store:
        rid = _recommendation(store, "intra", {"prefill_share": 0.5})
        store.insert_layout_events([
            {"ts_s": 100.0, "host": "h", "run_id": "r1", "from_layout": "monolithic",
             "to_layout": "intra", "actor": "gpuprobe-apply", "reason": f"recommendation {rid}"},
            {"ts_s": 200.0, "host": "h", "run_id": "r1", "from_layout": "intra",
             "to_layout": "intra", "actor": "autopilot", "reason": "forecast"}])
        store.insert_requests([req("r1", "a", 99.0), req("r1", "b", 102.0),
                               req("r1", "c", 150.0), req("r2", "d", 120.0),
                               req("r1", "e", 201.0)])
        store.mark_recommendation_applied(rid, "http://h:1", ts_s=101.0)
        result = check_recommendation(store, rid)
    assert (result["num_requests"], result["num_ok"], result["note"]) == (2, 2, None)
    ttft = next(r for r in result["metrics"] if r["metric"] == "ttft_p50_s")
    assert ttft["measured"] == pytest.approx(0.05) and ttft["rel_error"] == pytest.approx(0.0)


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", *args], capture_output=True,
                          text=True, timeout=180, **kw)


def test_one_controller_per_server_and_apply_force_takes_over(server, tmp_path):
    """Two autopilots from two stores on one server, one through localhost and one through
    127.0.0.1: the first holds the server's lease, the second refuses to start, naming it;
    `apply` is refused during that lease; `apply --force` goes through, and the autopilot
    stops, saying who took the server over."""
    from gpuprobe.perf.roofline import roofline_profile
    srv, db, tmp = server
    port = srv.url.rsplit(":", 1)[1]
    (tmp_path / "l40s.json").write_text(roofline_profile("llama3-8b", "l40s").dumps())
    pilot = ["autopilot", "--profile", str(tmp_path / "l40s.json"), "--admin-token-file",
             str(tmp / "token"), "--interval", "1s", "--candidates", "window", "--no-forecast"]
    first = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "--store",
                              str(tmp_path / "a.db"), *pilot, "--target", f"http://localhost:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lease = wait_for(lambda: _layout(srv.url)["lease"].get("holder"), "the first autopilot's lease")
        assert lease.startswith("autopilot@") and lease.endswith(f":{first.pid}")
        second = _cli("--store", str(tmp_path / "b.db"), *pilot, "--target", f"http://127.0.0.1:{port}")
        assert second.returncode == 2 and f"the lease is held by {lease}" in second.stderr, second.stderr
        assert len(second.stderr.strip().splitlines()) == 1 and "not started" in second.stderr

        with Store.open(db) as store:
            rid = _recommendation(store, "monolithic", {"chunked_prefill": True,
                                                        "max_num_batched_tokens": 128})
        before = _layout(srv.url)["history"]
        apply = ["--store", str(db), "apply", "--recommendation", str(rid), "--target", srv.url,
                 "--admin-token-file", str(tmp / "token")]
        refused = _cli(*apply)
        assert refused.returncode == 1 and f"held by {lease}" in refused.stderr, refused.stderr
        assert re.search(r"until \d\d:\d\d:\d\d \(in \d+ s\)", refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1 and "nothing was changed" in refused.stderr
        assert _layout(srv.url)["history"] == before

        forced = _cli(*apply, "--force")
        assert forced.returncode == 0, forced.stderr
        assert f"took the server over from {lease}, whose lease ended (--force)" in forced.stdout
        assert _layout(srv.url)["chunked_prefill_tokens"] == 128
        out, err = first.communicate(timeout=120)  # it notices at its next decision
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert "its lease is gone" in err and "gpuprobe-apply forced a layout change at" in err, err
    wait_for(lambda: _events(db).kind.eq("lease_takeover").any(), "the takeover event")
    events = _events(db)
    assert f"gpuprobe-apply forced a layout change over {lease}'s lease" in \
        events[events.kind == "lease_takeover"].message.iloc[-1]


def _events(db):
    with Store.open(db, read_only=True) as store:
        return store.events(source="server")


def test_the_dashboards_apply_names_the_holder_and_takes_over_only_when_asked(server):
    from gpuprobe.dashboard.apply import apply
    from gpuprobe.deploy.admin_client import AdminClient
    srv, db, tmp = server
    admin = AdminClient(srv.url, TOKEN)
    admin.acquire_lease("someone@elsewhere:7", "tuning by hand", ttl_s=120)
    with Store.open(db) as store:
        rid = _recommendation(store, "monolithic", {})
    try:
        with pytest.raises(AdminError, match="held by someone@elsewhere:7 for 'tuning by hand' "
                                             r"until \d\d:\d\d:\d\d") as exc:
            apply(str(db), rid, srv.url, TOKEN)
        assert exc.value.kind == "held" and "\n" not in str(exc.value)
        out = apply(str(db), rid, srv.url, TOKEN, force=True)
    finally:
        if admin.lease().get("held"):
            admin.release_lease("someone@elsewhere:7")
    assert out["took_over"] == "someone@elsewhere:7" and out["layout"] == "monolithic"
    assert admin.lease()["held"] is False
