"""The fleet through a real Prometheus (Debian's 2.42): three agents (the fake NVML at the
hardware edge; node3 has no GPU) and a reference server, scraped every second, read back by
gpuprobe's Prometheus source in the store's shapes; the shipped rules pass promtool."""
import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from fake_nvml import FakeNvml

from gpuprobe.collectors import config
from gpuprobe.collectors.agent import Agent
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.server.launch import start_server
from gpuprobe.sources.fleet import fleet_groups, fleet_hosts
from gpuprobe.sources.prom_mix import bucket_mix
from gpuprobe.sources.prometheus import PrometheusSource
from gpuprobe.sources.promapi import SourceError
from gpuprobe.store import Store

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
DEPLOY = Path(__file__).resolve().parent.parent / "docs" / "deploy"
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed "
                                      "(make test installs it when run as root)")


class AgentThread:
    """An in-process agent on its own event loop, serving /metrics on a free port."""

    def __init__(self, db: Path, host: str, scrape: str, gpus: int):
        cfg = config.AgentConfig(metrics_port=0, flush_interval=0.5, duration=0,
                                 scrape=(scrape,), intervals=config.Intervals(nvml=0.5, gpm=0.5, proc=0,
                                                                             host=0.5, scrape=1.0))
        self.store = Store.open(db)
        nvml = FakeNvml(gpus) if gpus else FakeNvml(no_driver=True)
        self.agent = Agent(cfg, self.store, nvml=nvml, log=lambda m: None, host=host)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.agent.run(),), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while self.agent.metrics_port is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.target = f"127.0.0.1:{self.agent.metrics_port}"

    def stop(self):
        self.loop.call_soon_threadsafe(self.agent.stop)
        self.thread.join(10)
        self.store.close()


def _phases_seen(src, t0: float, t2: float) -> str:
    """What the report's phases were made of (its bucket, each bucket's prefill share and GPU
    readings), for a failure to explain itself."""
    bucket = min(60.0, max((t2 - t0) / 6, 1.0))
    mix = bucket_mix(src.api, t0, t2, bucket)
    gpu = src.downsample("sm_util_pct", t0, t2, max_points=max(1, round((t2 - t0) / bucket)))
    return (f"bucket {bucket:.2f} s; shares at {(mix.ts_s - t0).round(2).tolist()}: "
            f"{mix.prefill_token_share.round(3).tolist()}; GPU readings at "
            f"{sorted(set((gpu.ts_s - t0).round(2)))}")


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _wait_for(fn, what: str, timeout_s: float = 40.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = fn()
        except (SourceError, OSError):
            got = None
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never had {what}")


@needs_prometheus
@pytest.mark.timeout(300)
def test_fleet_through_prometheus(tmp_path):
    with start_server("tiny", "monolithic", store=str(tmp_path / "serve.db")) as srv:
        agents = [AgentThread(tmp_path / f"a{i}.db", f"node{i}", srv.url + "/metrics", gpus)
                  for i, gpus in ((1, 2), (2, 2), (3, 0))]
        port = free_port("127.0.0.1")
        shutil.copy(DEPLOY / "gpuprobe-rules.yml", tmp_path / "gpuprobe-rules.yml")
        targets = lambda ts, group: f"      - targets: {ts}\n        labels: {{host_group: {group}}}\n"
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [gpuprobe-rules.yml]\n"
            "scrape_configs:\n  - job_name: gpuprobe-agent\n    static_configs:\n"
            + targets([a.target for a in agents[:2]], "chat") + targets([agents[2].target], "code")
            + f"  - job_name: engines\n    static_configs:\n      - targets: ['{srv.url.split('//')[1]}']\n")
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            src = PrometheusSource(f"http://127.0.0.1:{port}", min_step_s=1.0)
            _wait_for(lambda: len(src.api.query("count by (hostname) (gpuprobe_host_cpu_util_pct)")) == 3, "3 hosts")
            # 40-token prompts, 8 tokens out: 5 : 1. The server's counters appear with the first
            # request; the range starts after Prometheus has it whole, so that every token counted
            # in the range is one of the six requests'.
            request = {"model": "tiny", "prompt": list(range(5, 45)), "max_tokens": 8, "ignore_eos": True}
            _post(srv.url + "/v1/completions", request)
            _wait_for(lambda: [v for _, v in src.api.query("sum(vllm:generation_tokens_total)")] == [8],
                      "the engine's counters")
            t0 = time.time()
            time.sleep(1.5)
            for _ in range(6):
                _post(srv.url + "/v1/completions", request)
                time.sleep(0.5)
            _wait_for(lambda: [v for _, v in src.api.query("sum(vllm:generation_tokens_total)")] == [56], "56 tokens")
            time.sleep(2.5)  # one more scrape of every agent's engine rates
            t1 = time.time()

            # The store's shapes, with the agents' values: the fake GPU serves constants.
            down = src.downsample("sm_util_pct", t0, t1, max_points=50)
            assert set(zip(down.host, down.device)) == {(f"node{i}", f"gpu{g}") for i in (1, 2) for g in (0, 1)}
            assert list(down.columns) == ["ts_s", "host", "device", "value_min", "value_max", "value_mean",
                                          "num_samples"]
            fake = FakeNvml(2)
            for g in (0, 1):
                part = down[down.device == f"gpu{g}"]
                assert np.allclose(part[["value_min", "value_max", "value_mean"]], fake.expected(g)["sm_util_pct"])
            served = urllib.request.urlopen(f"http://{agents[0].target}/metrics", timeout=5).read().decode()
            power = src.samples("power_w", t1 - 3, t1, host="node1", device="gpu1")
            assert f'gpuprobe_gpu_power_w{{gpu="1",hostname="node1",uuid="GPU-fake-0001"}} {power.value.iloc[-1]}' in served
            series = src.series(t0, t1)
            assert set(series.host) == {"node1", "node2", "node3"}
            assert {"sm_util_pct", "cpu_util_pct", "prompt_tokens_per_s"} <= set(series.metric)

            # Fleet views: node3 is listed, its GPU figures missing (not zero).
            hosts = fleet_hosts(src, t0, t1, by="host_group").set_index("host")
            assert hosts.loc[["node1", "node2", "node3"], "num_gpus"].tolist() == [2, 2, 0]
            assert hosts.loc["node1", "power_w"] == pytest.approx(351.0)  # gpus 350.5 and 351.5
            assert np.isnan(hosts.loc["node3", "sm_util_pct"]) and hosts.loc["node3", "cpu_util_pct"] >= 0
            groups = fleet_groups(hosts.reset_index()).set_index("group")
            assert groups.loc["chat", "num_gpus"] == 4 and groups.loc["code", "hosts_reporting_gpu"] == 0
            by_model = fleet_hosts(src, t0, t1, by="model")
            assert set(by_model.group) == {"tiny"}

            # The mix from the engine's counters: the 5 : 1 prompt:output ratio, exact over one
            # bucket (both counters come from the same scrapes), near it over 5 s buckets (a
            # request's prompt and output tokens can land in neighbouring buckets).
            whole = bucket_mix(src.api, t0, t1, t1 - t0)
            assert len(whole) == 1
            assert whole.prefill_tokens_per_s[0] / whole.decode_tokens_per_s[0] == pytest.approx(5.0, rel=0.01)
            mix = bucket_mix(src.api, t0, t1, 5.0)
            assert mix.prefill_tokens_per_s.sum() / mix.decode_tokens_per_s.sum() == pytest.approx(5.0, rel=0.25)
            out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "analyze", "--source",
                                  f"prometheus=http://127.0.0.1:{port}", "--since", f"{t0:.3f}", "--until",
                                  f"{t1:.3f}", "--bucket", "5s", "--json"], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            body = json.loads(out.stdout)
            assert body["prompt_output_ratio"] == pytest.approx(5.0, rel=0.25) and body["buckets"]

            # A recommendation per group, and recommend on a group's rates, from the same figures.
            from gpuprobe.perf.roofline import roofline_profile
            (tmp_path / "h200.json").write_text(json.dumps(roofline_profile("llama3-8b", "h200").to_dict()))
            common = ["--source", f"prometheus=http://127.0.0.1:{port}", "--since", f"{t0:.3f}",
                      "--until", f"{t1:.3f}", "--profile", str(tmp_path / "h200.json"), "--json"]
            out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(tmp_path / "r.db"),
                                  "fleet", "--by", "host_group", *common], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            recs = {g["group"]: g["recommendation"] for g in json.loads(out.stdout)["groups"]}
            assert recs["chat"]["devices_per_host"] == 2 and recs["code"]["devices_per_host"] == 1
            # 40-token prompts, 8 tokens out on the H200 roofline: chunked monolithic serves the
            # most per device; every chunk budget above the 40-token prompts simulates alike, so
            # which one is named is the search's tie rule (on each group's own devices)
            assert {r["layout"] for r in recs.values()} == {"monolithic"}, recs
            assert {r["params"]["chunked_prefill_tokens"] >= 40 for r in recs.values()} == {True}, recs
            # the engines' histograms carry no host_group label (Prometheus scrapes the server
            # directly), so a group's lengths are its buckets' mean tokens per request
            assert recs["chat"]["lengths"] == "bucket means (the engine exports no length histograms)"
            out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(tmp_path / "r.db"),
                                  "recommend", "--group", "host_group=code", "--devices",
                                  str(recs["code"]["devices_per_host"]), *common], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            rec = json.loads(out.stdout)
            assert rec["label"] == recs["code"]["label"] and rec["workload"]["name"].startswith("prometheus=")
            # the same group's figures through recommend as through fleet: the same search
            assert rec["max_goodput_rps_per_device"] == pytest.approx(recs["code"]["max_goodput_rps_per_device"])

            # forecast --source: the engines' rates from Prometheus, forecast like a workload's.
            out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(tmp_path / "r.db"),
                                  "forecast", "--source", f"prometheus=http://127.0.0.1:{port}",
                                  "--since", f"{t0:.3f}", "--until", f"{t1:.3f}", "--bucket", "2s",
                                  "--horizon", "4s", "--json"], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            fc = json.loads(out.stdout)
            assert len(fc["series"]["prefill_tokens_per_s"]["mean"]) == 2 and fc["forecast_id"]

            # report --source: the GPU counters in prefill- and decode-heavy periods from Prometheus.
            # A decode-heavy stretch (4 tokens in, 40 out) after the 5 : 1 one, so the range holds
            # both phases whatever the machine's speed: one mix alone made the phases depend on how
            # requests fell across the buckets' edges.
            decode = {**request, "prompt": [5, 6, 7, 8], "max_tokens": 40}
            for _ in range(4):
                _post(srv.url + "/v1/completions", decode)
                time.sleep(0.5)
            _wait_for(lambda: [v for _, v in src.api.query("sum(vllm:generation_tokens_total)")] == [216],
                      "216 tokens")
            time.sleep(2.5)  # one more scrape of every agent's engine rates
            t2 = time.time()
            out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(tmp_path / "r.db"),
                                  "report", "--workload", "azure-code", "--out", str(tmp_path / "r.html"),
                                  "--source", f"prometheus=http://127.0.0.1:{port}", "--since", f"{t0:.3f}",
                                  "--until", f"{t2:.3f}", "--json"], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            assert "GPU counters beside served requests" not in json.loads(out.stdout)["missing"], \
                _phases_seen(src, t0, t2)
            page = (tmp_path / "r.html").read_text()
            assert "<td>sm_util_pct</td><td class=\"num\">70.5</td>" in page  # the fake GPUs: 70 and 71

            # The dashboard's Fleet page reads the same through --source.
            at = _fleet_page(f"prometheus=http://127.0.0.1:{port}", tmp_path)
            assert [m.value for m in at.metric] == ["3", "4", "1"]  # hosts, GPUs, groups by model
            assert len(at.dataframe) == 2 and not at.error

            # The shipped recording rules evaluate on these series.
            rec = _wait_for(lambda: src.api.query("hostname:gpuprobe_gpu_sm_util_pct:avg"), "recording rules")
            assert {lab["hostname"] for lab, _ in rec} == {"node1", "node2"}
        finally:
            prom.terminate()
            prom.wait(10)
            for a in agents:
                a.stop()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool comes with Debian's prometheus")
def test_shipped_rules_and_config_pass_promtool():
    rules = subprocess.run([PROMTOOL, "check", "rules", str(DEPLOY / "gpuprobe-rules.yml")],
                           capture_output=True, text=True)
    assert rules.returncode == 0 and "SUCCESS" in rules.stdout, rules.stdout + rules.stderr
    conf = subprocess.run([PROMTOOL, "check", "config", str(DEPLOY / "prometheus.yml")],
                          capture_output=True, text=True)
    assert conf.returncode == 0, conf.stdout + conf.stderr
    dash = json.loads((DEPLOY / "grafana-gpuprobe-fleet.json").read_text())
    assert all(t["expr"] for p in dash["panels"] for t in p["targets"])


def test_unreachable_or_wrong_source_is_one_line(tmp_path):
    port = free_port("127.0.0.1")
    for args, code, text in (
            (["analyze", "--source", f"prometheus=http://127.0.0.1:{port}"], 1, "unreachable"),
            (["fleet", "--source", f"prometheus=http://127.0.0.1:{port}"], 1, "unreachable"),
            (["analyze", "--source", "graphite=http://x"], 2, "expected prometheus="),
            (["analyze", "--source", f"prometheus=http://127.0.0.1:{port}", "--workload", "w"], 2, "give one"),
            (["fleet", "--source", f"prometheus=http://127.0.0.1:{port}", "--since", "yesterday"], 2, "--since")):
        out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(tmp_path / "s.db"), *args],
                             capture_output=True, text=True)
        assert out.returncode == code, (args, out.stderr)
        assert text in out.stderr and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def _fleet_page(spec: str, tmp_path):
    import os

    from streamlit.testing.v1 import AppTest
    Store.open(tmp_path / "dash.db").close()
    old = {k: os.environ.get(k) for k in ("GPUPROBE_SOURCE", "GPUPROBE_STORE")}
    os.environ.update(GPUPROBE_SOURCE=spec, GPUPROBE_STORE=str(tmp_path / "dash.db"))
    try:
        at = AppTest.from_file(str(DEPLOY.parent.parent / "dashboard" / "views" / "fleet.py"),
                               default_timeout=60).run()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_fleet_page_says_when_prometheus_is_down(tmp_path):
    at = _fleet_page(f"prometheus=http://127.0.0.1:{free_port('127.0.0.1')}", tmp_path)
    assert "unreachable" in at.error[0].value and "still work" in at.error[0].value


def test_prometheus_error_answers_are_named():
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if "query_range" in self.path:
                body, code = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}, 400
            else:
                body, code = {"status": "success", "warnings": ["partial response: 1 store down"],
                              "data": {"resultType": "vector", "result": []}}, 200
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        src = PrometheusSource(f"http://127.0.0.1:{httpd.server_port}")
        with pytest.raises(SourceError, match="parse error at char 3"):
            src.downsample("sm_util_pct", 0, 100)
        assert src.api.query("up") == [] and src.api.warnings == ["partial response: 1 store down"]
    finally:
        httpd.shutdown()
