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


def _handoff_rows(rng, lone_n: int, burst_n: int) -> pd.DataFrame:
    """Server request rows: lone requests (one at a time, 2 ms + 1 GB/s, spread 0.8-1.6x)
    and bursts of 8 sent together whose handoffs queue (+5-40 ms)."""
    rows, t = [], 0.0
    for i in range(lone_n):
        size = float(rng.choice([64, 128, 256]) << 12)
        h = (0.002 + size / 1e9) * rng.uniform(0.8, 1.6)
        rows.append({"arrival_s": t, "prefill_end_s": t + 0.01, "kv_handoff_s": h,
                     "kv_handoff_bytes": size, "finish_s": t + 0.01 + h + 0.005})
        t += 0.1
    for b in range(burst_n):
        for j in range(8):
            size = float(64 << 12)
            h = 0.002 + size / 1e9 + rng.uniform(0.005, 0.04)
            rows.append({"arrival_s": t, "prefill_end_s": t + 0.01 * (j + 1), "kv_handoff_s": h,
                         "kv_handoff_bytes": size, "finish_s": t + 0.2})
        t += 0.5
    # a prefill-only request (no handoff) in flight over the last lone handoff's window
    last = rows[lone_n - 1]
    rows.append({"arrival_s": last["prefill_end_s"], "prefill_end_s": np.nan, "kv_handoff_s": np.nan,
                 "kv_handoff_bytes": np.nan, "finish_s": last["prefill_end_s"] + 0.02})
    return pd.DataFrame(rows)


def test_lone_handoffs_are_those_with_nothing_else_in_flight():
    from gpuprobe.perf.profile_fit import lone_handoffs

    r = _handoff_rows(np.random.default_rng(2), 10, 3)
    with_handoff = r.dropna(subset=["kv_handoff_s"])
    lone = lone_handoffs(with_handoff, r)
    assert lone[:9].all() and not lone[9]  # the 10th overlaps the prefill-only request
    assert not lone[10:].any()             # every burst member has seven others in flight
    assert not lone_handoffs(with_handoff, r.drop(columns="finish_s")).any()


def test_link_is_fitted_on_lone_handoffs_with_their_spread():
    r = _handoff_rows(np.random.default_rng(3), 60, 20)
    link = fit_link(r)
    mid = 0.002 * 1.2  # the median of uniform(0.8, 1.6) over the line
    assert link.latency_s == pytest.approx(mid, rel=0.2)
    assert link.seconds(256 << 12) == pytest.approx((0.002 + (256 << 12) / 1e9) * 1.2, rel=0.15)
    s = np.array(link.spread)
    assert len(s) == 100 and (np.diff(s) >= 0).all()
    assert s[0] == pytest.approx(0.8 / 1.2, rel=0.1) and s[-1] == pytest.approx(1.6 / 1.2, rel=0.1)
    # the decode worker's import, charged at admission by the simulator, is taken off each
    admit = lambda tokens: 0.001
    less = fit_link(r.assign(prompt_tokens=64.0), admit=admit)
    assert less.latency_s == pytest.approx(link.latency_s - 0.001, abs=3e-4)
    # too few lone ones: the 10th percentile of all of them, no spread
    few = fit_link(_handoff_rows(np.random.default_rng(3), 3, 20))
    assert few.spread == () and few.latency_s > link.latency_s


def test_link_spread_survives_a_profile_file_and_bad_spread_is_refused():
    from gpuprobe.perf.costmodel import Link

    link = Link(0.002, 1e9, "measured", (0.8, 1.0, 1.5))
    assert Link.from_dict(link.to_dict()) == link
    assert Link.from_dict({"latency_s": 0.002, "bytes_per_s": 1e9}).spread == ()
    with pytest.raises(ValueError, match="link spread"):
        Link.from_dict({"latency_s": 0.002, "bytes_per_s": 1e9, "spread": [1.5, 0.8]})


def test_receive_cpu_fit_recovers_per_request_and_per_token_costs():
    from gpuprobe.perf.profile_fit import recv_fit

    rng = np.random.default_rng(1)
    tokens = rng.integers(1, 800, 300).astype(float)
    cpu = (0.0006 + 4e-6 * tokens) * rng.lognormal(0, 0.1, 300)  # noisy, never negative
    cpu[::25] *= 5  # a few receives preempted mid-way: medians must hold
    r0, r1 = recv_fit(pd.DataFrame({"prompt_tokens": tokens, "kv_recv_cpu_s": cpu}))
    assert r0 == pytest.approx(0.0006, rel=0.25) and r1 == pytest.approx(4e-6, rel=0.15)
    # no receive column (intra, other servers) or too few rows: no receive term
    assert recv_fit(pd.DataFrame({"prompt_tokens": tokens})) == (0.0, 0.0)
    assert recv_fit(pd.DataFrame({"prompt_tokens": [5.0, 6.0], "kv_recv_cpu_s": [1e-3, 1e-3]})) == (0.0, 0.0)
    # one size only: a flat cost
    one = recv_fit(pd.DataFrame({"prompt_tokens": [64.0] * 5, "kv_recv_cpu_s": [1e-3, 2e-3, 1e-3, 1e-3, 9e-3]}))
    assert one == (pytest.approx(1e-3), 0.0)


def test_receive_cost_reaches_the_cross_decode_worker_and_its_admissions():
    from gpuprobe.perf.costmodel import StepCost
    from gpuprobe.perf.profile import from_steps

    steps = []
    t = 0.0
    for layout in ("intra", "cross"):
        for role in ("prefill", "decode"):
            for i in range(12):
                B = 1 + i % 6
                steps.append({"layout": layout, "role": role, "start_s": t, "duration_s": 0.002 + 1e-4 * B,
                              "num_prefill_tokens": 64 * B if role == "prefill" else 0,
                              "num_prefill_seqs": B if role == "prefill" else 0,
                              "num_decode_seqs": B if role == "decode" else 0,
                              "num_decode_ctx_tokens": 100 * B if role == "decode" else 0})
                t += 0.01
    tokens = np.tile([16.0, 64.0, 256.0, 512.0], 5)
    reqs = pd.DataFrame({"layout": ["cross"] * 20 + ["intra"] * 20, "prompt_tokens": np.r_[tokens, tokens],
                         "kv_handoff_s": 0.01, "kv_handoff_bytes": np.r_[tokens, tokens] * 2048,
                         "kv_recv_cpu_s": np.r_[0.0005 + 3e-6 * tokens, [np.nan] * 20]})
    workers = from_steps(pd.DataFrame(steps), reqs)["workers"]
    cross, intra = workers["cross.decode"], workers["intra.decode"]
    assert cross.recv_s == pytest.approx(0.0005, rel=0.01) and cross.recv_per_token_s == pytest.approx(3e-6, rel=0.01)
    assert intra.recv_s == 0.0 and intra.recv_per_token_s == 0.0
    admit = cross.import_fn()(100)
    assert admit == pytest.approx(cross.import_s + cross.import_per_token_s * 100 + 0.0008, rel=0.01)
    assert StepCost.from_dict(cross.to_dict()) == cross
