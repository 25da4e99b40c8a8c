"""A real Prometheus (Debian's 2.42) scrapes the reference server as it would scrape vLLM."""
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from gpuprobe.server.kv_transfer import free_port
from gpuprobe.server.launch import start_server

PROMETHEUS = shutil.which("prometheus")
pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus is not installed "
                                 "(make test installs it when run as root)")]


def _query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())["data"]["result"]


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_prometheus_scrapes_vllm_names(tmp_path):
    with start_server("tiny", "monolithic", store=str(tmp_path / "s.db")) as srv:
        for _ in range(3):
            _post(srv.url + "/v1/completions", {"model": "tiny", "prompt": [5, 6, 7, 8], "max_tokens": 4,
                                                "ignore_eos": True})
        target = srv.url.split("//", 1)[1]
        prom_port = free_port("127.0.0.1")
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: refserver\n    static_configs:\n      - targets: ['{target}']\n")
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            result, deadline = [], time.monotonic() + 60
            while time.monotonic() < deadline and not result:
                time.sleep(1)
                try:
                    result = _query(prom_port, 'vllm:generation_tokens_total{job="refserver"}')
                except OSError:
                    continue
            assert result, "Prometheus never scraped vllm:generation_tokens_total"
            assert float(result[0]["value"][1]) == 12.0  # 3 requests x 4 forced tokens
            assert result[0]["metric"].get("model_name") == "tiny"
            hist = _query(prom_port, 'vllm:time_to_first_token_seconds_count{job="refserver"}')
            assert hist and float(hist[0]["value"][1]) == 3.0
            assert _query(prom_port, 'up{job="refserver"}')[0]["value"][1] == "1"
        finally:
            prom.terminate()
            prom.wait(10)
