"""The KV handoff link is fitted to uncontended transfers, not to handoffs queued in bursts."""
import numpy as np
import pandas as pd
import pytest

from gpuprobe.perf.profile_fit import fit_link


def test_queued_handoffs_do_not_inflate_the_latency():
    rng = np.random.default_rng(0)
    n = 200
    size = rng.choice([64 << 10, 640 << 10], n).astype(float)
    transfer = 0.003 + size / 2e9                       # 3 ms + 2 GB/s
    queued = rng.exponential(0.02, n) * (rng.random(n) < 0.8)  # most waited behind others
    link = fit_link(pd.DataFrame({"kv_handoff_s": transfer + queued, "kv_handoff_bytes": size}))
    assert link.latency_s == pytest.approx(0.003, abs=0.0015)
    assert link.seconds(640 << 10) < 0.006


def test_too_few_handoffs_give_no_link_and_one_size_gives_latency_only():
    assert fit_link(pd.DataFrame({"kv_handoff_s": [0.01], "kv_handoff_bytes": [100.0]})) is None
    assert fit_link(pd.DataFrame({"x": [1]})) is None
    one = fit_link(pd.DataFrame({"kv_handoff_s": [0.004, 0.005, 0.02, 0.03],
                                 "kv_handoff_bytes": [1e5] * 4}))
    assert one.latency_s == pytest.approx(np.percentile([0.004, 0.005, 0.02, 0.03], 10))
    assert one.bytes_per_s >= 1e12
