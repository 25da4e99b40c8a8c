"""The answer in words (gpuprobe.decide.answer): one sentence from the stored Recommendation,
its margin over the best other layout (not a sibling setting), the SLO read from its fields,
a capped goodput as a lower bound, a validate run that disagrees said with both figures; the
price table; drift; the goodput search raising its cap; no layout meeting the SLO as a JSON
answer and exit 3. Recommendations built by hand, or by recommend on a roofline profile."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpuprobe.cli.main import main
from gpuprobe.decide.answer import answer, slo_words
from gpuprobe.deploy.drift import drift_warning, runs
from gpuprobe.decide.prices import device_price
from gpuprobe.decide.recommendation import Confidence, Deployment, Recommendation
from gpuprobe.decide.slo import parse_slo
from gpuprobe.decide.validate_evidence import compare_validation
from gpuprobe.perf.metrics import Slo
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.store import Store

pytestmark = pytest.mark.timeout(90)
H200 = roofline_profile("llama3-8b", "h200")


def _cand(label, layout, g, capped=False, **params):
    return {"label": label, "layout": layout, "params": params, "max_goodput_rps_per_device": g,
            "capped": capped, "at_goodput": {"ttft_p99_s": 0.5, "tbt_p99_s": 0.05, "slo_attainment": 0.95}}


def _rec(capped=False, **kw) -> Recommendation:
    cands = (_cand("monolithic chunked 2048", "monolithic", 5.77, capped, chunked_prefill_tokens=2048),
             _cand("monolithic chunked 512", "monolithic", 5.77, capped, chunked_prefill_tokens=512),
             _cand("intra 40% prefill", "intra", 3.99, prefill_share=0.4))
    args = dict(deployment=Deployment("monolithic", chunked_prefill_tokens=2048, replicas=2),
                max_goodput_rps_per_device=5.77, candidates=cands, slo=Slo(3.0, 0.5, 0.9, name="custom"),
                confidence=Confidence(0.55, "medium", "the profile assumes some figures it did not measure"),
                margin=0.0, margin_over_other_layout=5.77 / 3.99 - 1, runner_up="monolithic chunked 512",
                max_devices=2, workload={"name": "azure-conv", "requests": 40, "rate_rps": 1.0,
                                         "token_scale": 0.05, "limit": 40},
                cost_per_device_hour=0.094, cost_per_million_output_tokens=0.118, cost_basis="list price assumed: x",
                cost_assumed=True)
    return Recommendation(**{**args, **kw})


def test_the_sentence_names_the_best_other_layout_the_slo_and_the_cost():
    a = answer(_rec())
    assert a.decision.startswith("Run monolithic with chunked prefill (2048 tokens a step) on 2 devices, "
                                 "one engine each: 5.77 req/s per device within the SLO (90% of requests get "
                                 "a first token within 3 s and then a token every 500 ms on average)")
    # the margin is over intra (the best other layout), not the 512-token sibling it ties with
    assert "45% more than the best other layout, intra 40% prefill (3.99 req/s per device)" in a.decision
    assert "512" not in a.decision and "$0.118 per million output tokens (list price assumed)" in a.decision
    assert a.workload == "the first 40 requests of azure-conv, lengths x0.05, at 1 req/s"
    assert "--" not in a.decision + a.slo + a.margin + a.next_step + a.risk
    capped = answer(_rec(capped=True))
    assert "at least 5.77 req/s per device" in capped.decision and "at least 45% more" in capped.margin


def test_slo_in_words_reads_its_fields():
    s = parse_slo("ttft_p99=2s,tpot_p90=100ms,itl_p99=50ms,attain=0.95")
    assert slo_words(s) == ("95% of requests get a first token within 2 s and then a token every 100 ms on "
                            "average; first token at p99 within 2 s, time per output token at p90 within "
                            "100 ms, every gap between tokens at p99 within 50 ms")


def test_a_validate_that_measured_another_layout_best_is_said_with_both_figures():
    body = {"model": "tiny", "workload": {"replayed_requests": 40, "token_scale": 0.05},
            "summary": {k: {"slo_attainment_measured": v} for k, v in (("monolithic", 0.8), ("intra", 1.0))},
            "rows": [{"layout": "monolithic", "metric": "tbt_p99_s", "measured": 0.12},
                     {"layout": "intra", "metric": "tbt_p99_s", "measured": 0.08}]}
    v = {"workload": "azure-conv", "best_measured": "intra", "body": body}
    out = compare_validation("monolithic", v)
    assert out["agrees"] is False
    assert out["text"] == ("the last validate on azure-conv (tiny model, 40 requests, lengths x0.05) measured "
                           "intra best: 100% of requests within the SLO, p99 TBT 80 ms, against monolithic's "
                           "80% of requests within the SLO, p99 TBT 120 ms (+20 points of attainment)")
    a = answer(_rec(), v)
    assert a.agrees is False and a.risk.startswith("The measurement disagrees: the last validate")
    assert compare_validation("intra", v)["agrees"] is True


def test_list_prices_are_labelled_assumed_and_a_given_price_is_not():
    h = device_price(H200.meta)
    assert (h.usd_per_device_hour, h.assumed) == (4.54, True) and "list price assumed: H200 SXM" in h.basis
    assert device_price({"gpu": "RTX 9000"}).usd_per_device_hour == 3.95  # not in the table: an H100 stands in
    cpu = device_price({"source": "client"}, num_cores=2)
    assert cpu.usd_per_device_hour == pytest.approx(2 * 0.0000131 * 3600) and "CPU server of 2 cores" in cpu.basis
    given = device_price(H200.meta, given=3.5)
    assert (given.usd_per_device_hour, given.assumed) == (3.5, False)


def test_drift_is_warned_only_when_the_applied_layout_no_longer_runs():
    rec = _rec(applied_s=100.0, applied_target="http://h:8000", id=7)
    same = {"layout": "monolithic", "chunked_prefill_tokens": 2048, "actor": "gpuprobe-apply"}
    assert runs(rec.deployment, same) and drift_warning(rec, same) is None
    moved = {"layout": "intra", "prefill_share": 0.5, "actor": "admin", "since_s": 200.0}
    text = drift_warning(rec, moved)
    assert text.startswith("Drift: http://h:8000 runs intra with 50% prefill since ") and "(switched by admin)" in text
    assert drift_warning(_rec(), moved) is None  # never applied: nothing to drift from


def _short(n=24) -> pd.DataFrame:
    rng = np.random.default_rng(2)
    return pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, n / 2.0, n)),
                         "prompt_tokens": rng.integers(200, 600, n), "output_tokens": rng.integers(40, 120, n)})


def test_a_short_workload_raises_the_search_cap_until_the_top_is_decided(tmp_path, capsys):
    from gpuprobe.decide.rank import rank
    from gpuprobe.decide.recommend import recommend
    from gpuprobe.decide.search import undecided
    rec = recommend(_short(12), H200, parse_slo("chat"), devices=1, layouts=("monolithic",))
    assert rec.search["repeats"] > 1  # 12 requests are one burst at an H200's rates
    assert not undecided(rank([dict(c) for c in rec.candidates]))
    assert rec.cost_assumed and rec.cost_per_million_output_tokens > 0 and "H200" in rec.cost_basis


def test_no_layout_meeting_the_slo_is_a_json_answer_and_exit_3(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    _short().to_csv(trace, index=False)
    prof = tmp_path / "p.json"
    prof.write_text(H200.dumps())
    db = str(tmp_path / "g.db")
    rc = main(["recommend", "--workload", str(trace), "--profile", str(prof), "--store", db, "--json",
               "--slo", "ttft=1ms,tbt=1ms", "--layouts", "monolithic"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and out["feasible"] is False and out["closest"]["layout"] == "monolithic"
    assert out["short_by"]["slo_attainment_target"] == 0.9 and out["short_by"]["ttft_p99_over_target"] > 1
    assert out["decision"].startswith("No layout meets the SLO") and "comes closest" in out["decision"]
    with Store.open(db) as store:
        assert store.recommendations().empty


def test_a_validate_on_the_same_workload_naming_another_layout_lowers_confidence(tmp_path):
    from gpuprobe.decide.reasons import validate_reason
    from gpuprobe.decide.recommend import confidence
    body = {"summary": {"monolithic": {"slo_attainment_measured": 0.7}, "intra": {"slo_attainment_measured": 0.95}},
            "rows": []}
    with Store.open(tmp_path / "s.db") as store:
        store.insert_validation({"workload": "w", "best_measured": "intra", "best_predicted": "monolithic",
                                 "body": body})
        same = validate_reason(store, H200, "w", "monolithic")
        other = validate_reason(store, H200, "another", "monolithic")  # falls back to the last run
    assert same["evidence"]["same_workload"] and same["evidence"]["agrees"] is False
    assert not other["evidence"]["same_workload"]
    base = confidence(H200, 0.3, [])
    low = confidence(H200, 0.3, [same])
    assert low.value == pytest.approx(base.value * 0.6) and low.word == "low"
    assert "measured intra best: 95% of requests within the SLO, against monolithic's 70%" in low.basis
    assert confidence(H200, 0.3, [other]).value == base.value  # another workload's run: not weighed
