"""forecast --live: from the requests a server recorded in the store, else from the agent's
engine token rates; nothing recorded is one line."""
import json
import subprocess
import sys
import time

import numpy as np

from gpuprobe.forecast import forecast_live
from gpuprobe.store import Sample, Store


def test_live_from_server_requests_and_from_engine_rates(tmp_path):
    now = time.time()
    with Store.open(tmp_path / "s.db") as store:
        # 10 minutes of server requests, 1 per second, 500-token prompts and 50-token outputs
        t = now - 600 + np.arange(600.0)
        store.insert_requests([{"source": "server", "request_id": f"r{i}", "arrival_s": float(a),
                                "prompt_tokens": 500, "output_tokens": 50, "status": "ok"} for i, a in enumerate(t)])
        out = forecast_live(store, window_s=600, bucket_s=10, horizon_s=30, now_s=now)
        assert "requests" in out["source"] and out["window_start_s"] == now - 600
        pre = out["series"]["prefill_tokens_per_s"]
        assert len(pre["mean"]) == 3 and abs(np.mean(pre["mean"]) - 500) < 60
        assert all(lo <= m <= hi for lo, m, hi in zip(pre["lo80"], pre["mean"], pre["hi80"]))
    with Store.open(tmp_path / "agent.db") as store:
        store.insert_samples([Sample(now - 600 + k, "h", "engine", "http://e/metrics", m, v, "engine=vllm;model=x")
                              for k in range(0, 600, 2) for m, v in (("prompt_tokens_per_s", 800.0),
                                                                      ("generation_tokens_per_s", 200.0),
                                                                      ("requests_finished_per_s", 2.0))])
        out = forecast_live(store, window_s=600, bucket_s=10, horizon_s=20, now_s=now)
        assert out["source"] == "the agent's engine token rates"
        assert abs(np.mean(out["series"]["decode_tokens_per_s"]["mean"]) - 200) < 20


def test_live_cli_without_records_is_one_line_and_stores_a_forecast(tmp_path):
    db = tmp_path / "s.db"
    Store.open(db).close()
    run = lambda *a: subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(db), "forecast", *a],
                                    capture_output=True, text=True)
    out = run("--live", "--window", "10m")
    assert out.returncode == 2 and "no requests" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = run("--live", "--workload", "azure-conv")
    assert out.returncode == 2 and "give one of" in out.stderr
    now = time.time()
    with Store.open(db) as store:
        store.insert_requests([{"source": "tap", "request_id": f"r{i}", "arrival_s": now - 300 + i,
                                "prompt_tokens": 100, "output_tokens": 100, "status": "ok"} for i in range(300)])
    out = run("--live", "--window", "5m", "--horizon", "20s", "--json")
    assert out.returncode == 0, out.stderr
    fid = json.loads(out.stdout)["forecast_id"]
    with Store.open(db) as store:
        rows = store.forecasts(workload="live", forecast_id=fid)
    assert set(rows["metric"]) == {"prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s"}
