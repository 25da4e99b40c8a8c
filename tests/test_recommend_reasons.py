"""recommend's reasons read the store: the agent's GPU counters in prefill-heavy against
decode-heavy periods, and the last validate run. A real SQLite store, written as the agent,
the server and validate write it."""
import pandas as pd
import pytest

from gpuprobe.decide.reasons import counter_reason, validate_reason
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.store import Store
from gpuprobe.store.samples import Sample

pytestmark = pytest.mark.timeout(60)


def test_counters_split_by_the_servers_mix_and_the_last_validate(tmp_path):
    t0 = 1_700_000_000.0
    with Store.open(tmp_path / "g.db") as store:
        assert counter_reason(store) is None and validate_reason(store, roofline_profile("llama3-8b")) is None
        # 0-60 s: long prompts, short outputs (prefill-heavy); 60-120 s: the opposite
        reqs = [{"run_id": "r", "source": "server", "request_id": str(i), "arrival_s": t0 + i,
                 "prompt_tokens": 4000 if i < 60 else 50, "output_tokens": 10 if i < 60 else 500}
                for i in range(120)]
        store.insert_requests(reqs)
        store.insert_samples([Sample(t0 + i + 0.5, "h", "gpm", "gpu0", "sm_util_pct", 90.0 if i < 60 else 30.0)
                              for i in range(120)] +
                             [Sample(t0 + i + 0.5, "h", "gpm", "gpu0", "dram_bw_util_pct", 20.0 if i < 60 else 70.0)
                              for i in range(120)])
        r = counter_reason(store)
        assert r is not None and "prefill-heavy" in r["text"]
        assert r["evidence"]["sm_util_pct"]["prefill_heavy"] == pytest.approx(90.0)
        assert r["evidence"]["sm_util_pct"]["decode_heavy"] == pytest.approx(30.0)
        assert r["evidence"]["dram_bw_util_pct"]["decode_heavy"] == pytest.approx(70.0)
        store.insert_validation({"workload": "azure-conv", "model": "tiny", "device": "cpu",
                                 "profile": "p", "best_measured": "intra", "best_predicted": "cross",
                                 "bar_met": 0, "body": {
                                     "bar": 0.15,
                                     "summary": {"intra": {"median_abs_rel_error_p50": 0.08},
                                                 "cross": {"median_abs_rel_error_p50": 0.19}},
                                     "rows": [{"layout": "intra", "metric": "ttft_p50_s", "rel_error": -0.31},
                                              {"layout": "intra", "metric": "ttft_p99_s", "rel_error": 0.9},
                                              {"layout": "cross", "metric": "tbt_p50_s", "rel_error": 0.12}]}})
        v = validate_reason(store, roofline_profile("llama3-8b"))
        assert "measured best intra" in v["text"]
        assert "median p50 error intra 8%, cross 19% (bar 15%)" in v["text"]
        assert "largest intra ttft_p50_s -31%" in v["text"]  # a p50, as the bar judges: not the p99's 90%
        assert v["evidence"]["largest_error"] == ["intra ttft_p50_s", pytest.approx(-0.31)]
