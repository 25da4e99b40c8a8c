"""A decision costs only the prefill a prefix cache leaves: the hit rate the agent measured
(vLLM's prefix-cache counters in a real SQLite store) or the reuse a Mooncake trace's hash_ids
show, and the reasons say which figure was used and where it came from."""
import json

import numpy as np
import pandas as pd
import pytest

from gpuprobe.decide.decision import DecisionOptions, run_decision
from gpuprobe.decide.prefix_reuse import measure_reuse, with_cached_tokens
from gpuprobe.decide.slo import parse_slo
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.sim.simulator import simulate
from gpuprobe.store import Sample, Store

pytestmark = pytest.mark.timeout(120)
H200 = roofline_profile("llama3-8b", "h200")  # meta["model"]: the served model
SLO = parse_slo("ttft=1s,tbt=50ms")
ONE = DecisionOptions(max_devices=1, layouts=("monolithic",))


def _workload(n: int = 200, prompt: int = 4000, rate: float = 4.0) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    return pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, n / rate, n)),
                         "prompt_tokens": rng.integers(prompt * 3 // 4, prompt * 5 // 4, n),
                         "output_tokens": rng.integers(10, 30, n)})


def _scrapes(store, model: str, hits_per_s: float, queries_per_s: float, n: int = 10) -> None:
    """The agent's rows for one vLLM's counters: rates over 1 s windows."""
    t0, url = 1_800_000_000.0, "http://127.0.0.1:8000/metrics"
    store.insert_samples([Sample(t0 + i, "h", "engine", url, metric, value, f"engine=vllm;model={model}")
                          for i in range(n) for metric, value in
                          (("prefix_cache_hits_per_s", hits_per_s),
                           ("prefix_cache_queries_per_s", queries_per_s))])


def _reuse_reason(rec) -> dict | None:
    return next((r for r in rec.reasons if r["text"].startswith("prefills costed")), None)


def test_the_stores_hit_rate_for_the_served_model_shortens_every_prefill(tmp_path):
    wl = _workload()
    with Store.open(tmp_path / "none.db") as store:
        _scrapes(store, "other-model", 3000.0, 4000.0)  # another model's cache says nothing here
        plain = run_decision(wl, H200, SLO, ONE, store)
    assert _reuse_reason(plain) is None
    assert not any("prefix cache" in r["text"] for r in plain.reasons)
    with Store.open(tmp_path / "g.db") as store:
        _scrapes(store, "meta-llama/Llama3-8B", 3000.0, 4000.0)  # the profile's model, by path
        _scrapes(store, "other-model", 0.0, 4000.0)
        reused = run_decision(wl, H200, SLO, ONE, store)
    why = _reuse_reason(reused)
    assert why is not None, [r["text"] for r in reused.reasons]
    assert "hit rate 75.0%" in why["text"] and "for meta-llama/Llama3-8B" in why["text"]
    assert "30,000 of 40,000 prompt tokens" in why["text"]
    assert why["evidence"]["source"] == "store"
    assert why["evidence"]["cached_share"] == pytest.approx(0.75, abs=0.001)
    mixed = next(r for r in reused.reasons if r["text"].startswith("a decode step"))
    assert "not in the prefix cache" in mixed["text"]  # the step prefills the uncached part
    # A quarter of the prefill work per request: the same device sustains far more of them.
    assert reused.max_goodput_rps_per_device > 2 * plain.max_goodput_rps_per_device
    stored = json.loads(json.dumps(why["evidence"]))  # the reason's figures store as JSON
    assert stored["hits_tokens"] == pytest.approx(30_000)


def test_hash_ids_count_each_requests_cached_blocks():
    # A 3-block system prompt shared by every request, then each request's own 2 blocks.
    n, block = 40, 512
    wl = _workload(n=n, prompt=5 * block).assign(prompt_tokens=5 * block)
    wl["hash_ids"] = [json.dumps([1, 2, 3, 100 + 2 * i, 101 + 2 * i]) for i in range(n)]
    reuse = measure_reuse(wl, H200)
    assert reuse.source == "hash_ids"
    cached = with_cached_tokens(wl, reuse)["cached_tokens"].tolist()
    assert cached == [0] + [3 * block] * (n - 1)
    assert reuse.hit_rate == pytest.approx(3 / 5 * (n - 1) / n)


def test_the_simulator_prefills_from_the_first_uncached_token():
    wl = pd.DataFrame({"arrival_s": [0.0, 30.0], "prompt_tokens": [8000, 8000],
                       "output_tokens": [4, 4]})
    full = simulate(wl, H200, "monolithic").summary
    cached = simulate(wl.assign(cached_tokens=[6000, 7999]), H200, "monolithic")
    assert full["monolithic_max_prefill_tokens"] == 8000
    assert cached.summary["monolithic_max_prefill_tokens"] == 2000  # the rest was cached
    assert cached.requests["cached_tokens"].tolist() == [6000, 7999]
    ttft = cached.requests["ttft_s"].to_numpy()
    assert ttft[1] < ttft[0] < full["ttft_p50_s"]


def test_the_goodput_bound_counts_only_the_uncached_prefill():
    """The search's upper bound (decide/bounds.py) must not cap a candidate below what the
    simulator, given the cached tokens, would find."""
    from gpuprobe.decide.bounds import Lengths, goodput_bound
    from gpuprobe.decide.candidates import Candidate

    wl = _workload()
    cross = Candidate("cross", num_prefill=1, num_decode=1)
    full, cached = (goodput_bound(cross, H200, Lengths.of(w), SLO, 256, 8192)
                    for w in (wl, wl.assign(cached_tokens=wl["prompt_tokens"] * 3 // 4)))
    assert 3.0 < cached / full < 4.0  # a quarter of the prefill tokens, attention a bit more
