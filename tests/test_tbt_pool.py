"""What pooled TBT percentiles are made of: first gaps (hand-over / wait behind prefills) vs later."""
import math

import pandas as pd

from gpuprobe.perf.metrics import Slo, first_gap_shares
from gpuprobe.perf.validate import measured_summary


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
