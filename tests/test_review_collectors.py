"""Review fixes for agent, tap, replay, demo and packaging: bad flags are one line and exit 2,
the tap records a request upstream refused, replay's summary says what its units are, an empty
workload is refused, the demo says when it found no change points, and the wheel builds quietly."""
import asyncio
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import aiohttp
import pandas as pd
import pytest
from aiohttp import web

from cli_run import run_cli as cli
from fake_openai_server import FakeOpenAIServer
from gpuprobe.collectors.tap import Tap
from gpuprobe.demo.stages import stage_analyze
from gpuprobe.store import Store

ROOT = Path(__file__).resolve().parent.parent


def gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


UP = "--upstream=http://127.0.0.1:1"
BAD_FLAGS = [
    (["agent", "--metrics-port", "99999"], "--metrics-port: must be 0-65535"),
    (["agent", "--process-pattern", "("], "--process-pattern: '(' is not a valid regular expression"),
    (["agent", "--duration", "0s"], "--duration: '0s' is not a duration above 0"),
    (["agent", "--duration", "-5"], "--duration: '-5' is not a duration above 0"),
    (["agent", "--scrape", "notaurl"], "--scrape: 'notaurl' is not an http:// or https:// URL"),
    (["agent", "--max-buffer", "0"], "--max-buffer: must be at least 1"),
    (["agent", "--no-metrics", "--pid", "{gone}"], "--pid {gone}: no such process"),
    (["agent", "--config", "{toml}"], "agent.toml: scrape: 'notaurl' is not an http:// or https:// URL"),
    (["tap", UP, "--listen", "127.0.0.1:99999"], "--listen: must be 0-65535"),
    (["tap", UP, "--listen", "9000"], "--listen: '9000' is not HOST:PORT"),
    (["tap", UP, "--flush-interval=-1"], "--flush-interval: must be above 0"),
    (["tap", "--upstream", "notaurl"], "--upstream: 'notaurl' is not an http:// or https:// URL"),
    (["replay", "--workload", "w", "--target", "http://127.0.0.1:1", "--seed", "-1"], "--seed: must not be"),
]


@pytest.mark.timeout(30)  # before the fix, --duration 0s ran until killed
@pytest.mark.parametrize("argv,needle", BAD_FLAGS, ids=[f"{a[0]} {n[:28]}" for a, n in BAD_FLAGS])
def test_bad_flag_is_one_line_and_exit_2(tmp_path, capsys, argv, needle):
    toml = tmp_path / "agent.toml"
    toml.write_text('[agent]\nscrape = ["notaurl"]\n')
    pid = str(gone_pid())
    argv = [a.replace("{gone}", pid).replace("{toml}", str(toml)) for a in argv]
    rc, out, err = cli(capsys, *argv, "--store", str(tmp_path / "s.db"))
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and needle.replace("{gone}", pid) in err, err
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv,needle", [
    (["agent", "--metrics-port", "{port}"], "/metrics: cannot listen on 127.0.0.1:"),
    (["tap", UP, "--listen", "127.0.0.1:{port}"], "--listen: cannot listen on 127.0.0.1:"),
], ids=["agent", "tap"])
def test_port_in_use_is_one_line_and_exit_2(tmp_path, argv, needle):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", *[a.replace("{port}", port) for a in argv],
                              "--store", str(tmp_path / "s.db")], capture_output=True, text=True, timeout=50)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()  # no "Unclosed client session" after it
    assert len(lines) == 1 and needle + port in lines[0], out.stderr


async def upstream_refusing_bad_json(request):
    try:
        body = json.loads(await request.read())
    except ValueError:
        return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
    return web.json_response({"id": "c1", "model": body["model"], "choices": [{"text": "hi"}],
                              "usage": {"prompt_tokens": 3, "completion_tokens": 2}})


async def start(app):
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.mark.timeout(30)
def test_tap_records_a_request_upstream_refused(tmp_path):
    async def run(store):
        up_app = web.Application()
        up_app.router.add_post("/v1/completions", upstream_refusing_bad_json)
        up_runner, up_url = await start(up_app)
        tap_runner, tap_url = await start(Tap(up_url, store, run_id="t1").app())
        answers = []
        try:
            async with aiohttp.ClientSession() as client:
                for body in (b'{"model": "m", "prompt": "hi"}', b'{"model": "m", "prompt": '):
                    for url in (up_url, tap_url):
                        async with client.post(url + "/v1/completions", data=body) as r:
                            answers.append((r.status, await r.read()))
        finally:
            await tap_runner.cleanup()
            await up_runner.cleanup()
        return answers

    with Store.open(tmp_path / "s.db") as store:
        direct_ok, tapped_ok, direct_bad, tapped_bad = asyncio.run(run(store))
        rows = store.requests(source="tap")
    assert tapped_ok == direct_ok and tapped_bad == direct_bad and tapped_bad[0] == 400
    assert rows.status.tolist() == ["ok", "http_400"]
    bad = rows.iloc[1]
    assert pd.isna(bad.prompt_tokens) and pd.isna(bad.output_tokens) and "not JSON" in bad.error
    assert rows.iloc[0].prompt_tokens == 3 and rows.iloc[0].output_tokens == 2


def save_workload(db, name, n):
    with Store.open(db) as store:
        store.save_workload(name, pd.DataFrame({"arrival_s": [i * 0.01 for i in range(n)],
                                                "prompt_tokens": [7] * n, "output_tokens": [4] * n}))


@pytest.mark.timeout(60)
def test_replay_summary_names_its_units(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    save_workload(db, "w", 10)
    argv = ["replay", "--workload", "w", "--no-progress", "--store", db]
    with FakeOpenAIServer(refuse_every=5) as srv:
        rc, text, _ = cli(capsys, *argv, "--target", srv.url)
        rc_json, out_json, _ = cli(capsys, *argv, "--target", srv.url, "--json")
    assert rc == rc_json == 0
    lines = dict(line.split(None, 1) for line in text.splitlines())
    assert lines["status"] == "ok 8, http_429 2" and lines["sent"] == "10"
    assert lines["wall"].endswith(" s") and not any(key.endswith("_s") for key in lines)
    for key in ("ttft_p50", "ttft_p99", "tbt_p50", "tbt_p99", "send_lag_p50", "send_lag_p99"):
        value, unit = lines[key].split()
        assert unit == "ms" and float(value) >= 0, lines
    summary = json.loads(out_json)
    assert list(summary) == ["run_id", "scheduled", "sent", "interrupted", "status", "wall_s", "ttft_p50_s",
                             "ttft_p99_s", "tbt_p50_s", "tbt_p99_s", "send_lag_p50_s", "send_lag_p99_s"]
    assert summary["status"] == {"ok": 8, "http_429": 2} and 0 < summary["ttft_p50_s"] < 1


def test_replay_of_an_empty_workload_is_a_user_error(tmp_path, capsys):
    db = tmp_path / "s.db"
    save_workload(db, "keep", 3)
    with sqlite3.connect(db) as conn:  # as stores made before synth refused to store one hold it
        conn.execute("INSERT INTO workloads (name, created_s) VALUES ('x2', 0)")
    rc, out, err = cli(capsys, "replay", "--workload", "x2", "--target", "http://127.0.0.1:1", "--store", str(db))
    assert rc == 2 and out == ""
    assert err.strip() == "gpuprobe replay: error: --workload: workload 'x2' has no requests"
    with Store.open(db) as store:
        assert len(store.workload("keep")) == 3 and not len(store.runs("replay"))


def test_demo_says_when_there_are_no_change_points(tmp_path, capsys):
    with Store.open(tmp_path / "s.db") as store:
        for name in ("azure-code", "azure-conv"):  # a steady mix: nothing changes
            store.save_workload(name, pd.DataFrame({"arrival_s": [i * 1.0 for i in range(600)],
                                                    "prompt_tokens": [100] * 600, "output_tokens": [10] * 600}))
        stage_analyze(None, store)  # the stage reads only the store
    text = capsys.readouterr().out
    assert text.count("no change points") == 2 and "[]" not in text


def test_demo_help_says_which_store_it_uses(capsys):
    rc, out, _ = cli(capsys, "demo", "--help")
    assert rc == 0
    text = " ".join(out.split())
    assert "keeps its results in .demo/gpuprobe.db, never in $GPUPROBE_STORE" in text and "--store PATH" in text


@pytest.mark.timeout(120)
def test_wheel_builds_without_setuptools_warnings_and_ships_the_data(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the repository
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src)
    for name in ("gpuprobe", "collectors", "dashboard"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "--disable-pip-version-check", "-w", str(tmp_path / "whl"), str(src)],
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Warning" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-3000:]
    names = zipfile.ZipFile(next((tmp_path / "whl").glob("gpuprobe-*.whl"))).namelist()
    data = sorted(p.name for p in (ROOT / "gpuprobe" / "data").iterdir())
    assert sorted(n.split("/")[-1] for n in names if n.startswith("gpuprobe/data/")) == data
