"""The search over tensor-parallel sizes: a spec profile's workers at every TP size, memory
refusals with their numbers, every device laid out (or why not), the goodput bound that
skips candidates, and devices counted per TP group."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuprobe.decide.bounds import Lengths, goodput_bound
from gpuprobe.decide.candidates import Candidate
from gpuprobe.decide.recommend import recommend
from gpuprobe.decide.slo import parse_slo
from gpuprobe.perf.costmodel import Profile, simple_worker
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.sim.layouts import LayoutConfig, num_devices
from gpuprobe.perf.tp_family import profile_at, refusal, tp_options

pytestmark = pytest.mark.timeout(300)
P70 = roofline_profile("llama3-70b", "h200", tp=2)


def _poisson(isl: int, osl: int, n: int, rate: float = 4.0) -> pd.DataFrame:
    t = np.cumsum(np.random.default_rng(0).exponential(1 / rate, n))
    return pd.DataFrame({"arrival_s": t - t[0], "prompt_tokens": isl, "output_tokens": osl})


def test_a_spec_profile_carries_its_workers_at_every_tp_size():
    assert sorted(P70.tp_workers) == [1, 2, 4, 8]
    why = refusal(P70.tp_workers[1]["monolithic"])
    assert why.startswith("does not fit: llama3-70b on H200 SXM at TP1: weights 131.4 GiB")
    assert "more than 141 GiB x 0.9 = 126.9 GiB" in why
    assert refusal(P70.tp_workers[4]["cross.decode"]) is None
    back = Profile.from_dict(P70.to_dict())  # the file holds them
    opts = tp_options(back)
    assert sorted(opts["monolithic"]) == [1, 2, 4, 8] and opts["monolithic"][2].tp == 2
    at = profile_at(back, tp=4, prefill_tp=2, decode_tp=8)
    assert [at.workers[k].tp for k in ("monolithic", "intra.decode", "cross.prefill",
                                       "cross.decode")] == [4, 4, 2, 8]
    assert profile_at(back, 2, 2, 2) is back  # its own sizes: the profile itself
    measured = Profile(workers={"monolithic": simple_worker(0.01, 1e-4, 0, 0.01, 1e-3, 0)})
    with pytest.raises(ValueError, match="no monolithic worker at TP2"):
        profile_at(measured, tp=2)
    bad = P70.to_dict()
    bad["tp_workers"]["two"] = bad["tp_workers"].pop("2")
    with pytest.raises(ValueError, match="tp_workers.two"):
        Profile.from_dict(bad)


def test_the_bound_is_the_unit_s_capacity_by_hand():
    # prefill 1e-4 s a token (no fixed part), decode step 10 ms + 1 ms a sequence: a 20 ms
    # TPOT holds 10 sequences, 2 ms a token; a request: 100 x 1e-4 = 10 ms prefill + 10
    # decoded tokens x 2 ms = 30 ms of the worker -> 33.3 req/s
    w = simple_worker(0.0, 1e-4, 0.0, 0.010, 0.001, 0.0)
    prof = Profile(workers={k: w for k in ("monolithic", "cross.prefill", "cross.decode")})
    lengths = Lengths.of(pd.DataFrame({"prompt_tokens": [100] * 4, "output_tokens": [11] * 4}))
    slo = parse_slo("ttft=1s,tpot=20ms")
    assert goodput_bound(Candidate("monolithic"), prof, lengths, slo, 256, 2048) == \
        pytest.approx(1 / 0.030)
    # 1P1D: prefill 100 req/s, decode 10 seqs / 20 ms / 10 tokens = 50 req/s, over 2 devices
    assert goodput_bound(Candidate("cross"), prof, lengths, slo, 256, 2048) == pytest.approx(25.0)
    # one step of one sequence (11 ms) misses a 10 ms TPOT: nothing is served within it
    assert goodput_bound(Candidate("monolithic"), prof, lengths, parse_slo("ttft=1s,tpot=10ms"),
                         256, 2048) == 0.0


def test_devices_count_every_worker_s_tp_group():
    prof = profile_at(roofline_profile("llama3-8b", "h200"), tp=2, prefill_tp=1, decode_tp=4)
    assert num_devices("cross", LayoutConfig(num_prefill=2, num_decode=3), prof) == 2 + 3 * 4
    assert num_devices("monolithic", None, prof) == num_devices("intra", None, prof) == 2
    assert Candidate("cross", num_prefill=2, num_decode=3, prefill_tp=1, decode_tp=4).devices == 14


@pytest.mark.slow
def test_llama70b_on_8_h200_refuses_tp1_and_lays_out_all_devices_with_tp():
    wl = _poisson(2000, 200, 400)
    rec = recommend(wl, P70, parse_slo("ttft=2s,tpot=50ms"), devices=8)
    d = rec.deployment
    assert d.devices == 8 and d.unit.devices * d.replicas == 8
    assert min((d.prefill_tp, d.decode_tp) if d.layout == "cross" else (d.tp,)) >= 2
    assert all(r["params"].get("tp", 2) >= 2 and r["params"].get("prefill_tp", 2) >= 2
               for r in rec.candidates)
    refused = {(r["workers"], r["tp"]) for r in rec.search["refused"]}
    assert {("monolithic", 1), ("cross", 1), ("intra", 1), ("intra", 2)} <= refused
    texts = [r["text"] for r in rec.reasons]
    memory = next(t for t in texts if "left out" in t)
    assert "monolithic TP1, cross TP1 left out: does not fit: llama3-70b on H200 SXM at TP1: " \
           "weights 131.4 GiB" in memory
    assert any(t.startswith(f"{d.replicas} cop") and "out all 8 devices" in t for t in texts)
    assert rec.search["pruned"]  # the bound spared simulations
    best = rec.max_goodput_rps_per_device
    from gpuprobe.decide.search import BOUND_SLACK
    assert all(p["bound_rps_per_device"] * BOUND_SLACK < best for p in rec.search["pruned"])
    # 3 devices: no unit that fits divides them; the answer says how many stay idle
    three = recommend(wl, P70, parse_slo("ttft=2s,tpot=50ms"), devices=3,
                      layouts=("monolithic",))
    assert three.deployment.devices == 2
    assert any(r["text"].startswith("1 of 3 devices stay idle: no unit that fits divides 3")
               for r in three.reasons)
