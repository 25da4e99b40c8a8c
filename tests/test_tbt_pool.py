"""What pooled TBT percentiles are made of: first gaps (hand-over / wait behind prefills) vs later."""
import math

import pandas as pd

from gpuprobe.perf.metrics import Slo, first_gap_shares
from gpuprobe.validate.verdict import measured_summary


def test_first_gap_shares_counts_and_the_p99_tail():
    # 3 requests: first gaps 50, 40, 2 ms; 97 later gaps of 3 ms; one request never got a
    # second token and one got none at all.
    times = [[0.0, 0.050, *[0.050 + 0.003 * i for i in range(1, 98)]],
             [0.0, 0.040], [0.0, 0.002, 0.005], [0.0], []]
    out = first_gap_shares(times)
    assert out["tbt_gaps"] == 1 + 97 + 1 + 2  # 101 gaps
    assert math.isclose(out["tbt_first_share"], 3 / 101)
    # the two largest gaps (>= p99 of 101) are both first gaps
    assert out["tbt_p99_first_share"] == 1.0


def test_no_gaps_gives_nan_shares():
    out = first_gap_shares([[0.0], []])
    assert out["tbt_gaps"] == 0 and math.isnan(out["tbt_first_share"])


def test_measured_summary_carries_the_pool():
    rec = pd.DataFrame({"status": ["ok", "ok", "error"], "arrival_s": [0.0, 0.1, 0.2],
                        "token_times": [[0.01, 0.02, 0.025, 0.03], [0.02, 0.05], [0.01, 0.02]]})
    s = measured_summary(rec, Slo(), 1)
    assert s["tbt_gaps"] == 4  # the failed request's tokens are not pooled
    assert math.isclose(s["tbt_first_share"], 0.5)


def test_server_tbt_reads_the_replay_window_from_a_real_store(tmp_path):
    from gpuprobe.validate.server_tbt import server_tbt
    from gpuprobe.sim.predict import median_summary
    from gpuprobe.store import Store

    db = tmp_path / "server.db"
    with Store.open(db) as store:
        store.insert_requests([
            # in the replay: gaps 10, 20 ms and 5 ms
            {"source": "server", "request_id": "a", "arrival_s": 100.0, "status": "ok",
             "token_times": [0.01, 0.02, 0.04]},
            {"source": "server", "request_id": "b", "arrival_s": 100.5, "status": "ok",
             "token_times": [0.01, 0.015]},
            # calibration, long before the replay: left out
            {"source": "server", "request_id": "c", "arrival_s": 50.0, "status": "ok",
             "token_times": [0.0, 1.0]},
            # in the window but failed: left out
            {"source": "server", "request_id": "d", "arrival_s": 100.2, "status": "error",
             "token_times": [0.0, 2.0]},
        ])
    replay = pd.DataFrame({"arrival_s": [100.0, 100.5], "finish_s": [100.05, 100.52]})
    (r,) = server_tbt(str(db), [replay])
    assert r["tbt_gaps"] == 3
    assert math.isclose(r["tbt_p50_s"], 0.010, abs_tol=1e-9)
    assert r["tbt_p99_s"] < 0.021
    assert median_summary([r, {**r, "tbt_p50_s": 0.03}])["tbt_p50_s"] == 0.02
