"""The Recommendation type: rows written before it (by the old save_recommendation, kept in
tests/fixtures/recommendation_rows_v5.json) load with one name per setting; a new one survives
the store unchanged; a row that cannot be read is one line naming it; the one decision call
stores what it returns; the admin client names an unreachable server's kind."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuprobe.deploy.admin_client import AdminClient, AdminError, layout_body
from gpuprobe.decide.decision import DecisionOptions, WhatIf, run_decision
from gpuprobe.decide.recommendation import (Confidence, Deployment, Recommendation,
                                            latest_recommendation, load_recommendation,
                                            save_recommendation)
from gpuprobe.decide.slo import parse_slo
from gpuprobe.errors import UserError
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.store import Store

OLD_ROWS = json.loads((Path(__file__).parent / "fixtures" / "recommendation_rows_v5.json").read_text())


def test_rows_written_before_the_type_load(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        ids = {name: store.insert_recommendation(row) for name, row in OLD_ROWS.items()
               if not name.startswith("_")}
        mono = load_recommendation(store, ids["decode-heavy"])
        cross = load_recommendation(store, ids["prefill-heavy"])
        assert latest_recommendation(store, "decode-heavy") == mono
    # chunked_prefill + max_num_batched_tokens -> one setting; --devices 3 ran 3 copies
    assert mono.deployment == Deployment("monolithic", chunked_prefill_tokens=2048, replicas=3)
    assert (mono.deployment.devices, mono.max_devices, mono.label) == (3, 3, "monolithic chunked 2048")
    # 2P1D on 3 devices: one unit, the prefill side two thirds of it
    assert cross.deployment == Deployment("cross", num_prefill=2, num_decode=1, replicas=1)
    assert cross.deployment.devices == 3 and cross.deployment.prefill_fraction == pytest.approx(2 / 3)
    assert cross.decision.startswith("Run cross 2P1D on 3 device(s): 2.39 req/s per device")
    assert (cross.confidence.word, cross.runner_up, cross.slo.tbt_s) == ("medium", "cross 1P1D", 0.012)
    assert cross.cost_per_device_hour == 2.0 and cross.workload_name == "prefill-heavy"
    assert [c["label"] for c in cross.candidates] == ["cross 2P1D", "cross 1P1D", "cross 1P2D"]
    assert (cross.host, cross.created_s, cross.applied_s) == ("old-host", 1764979200.0, None)
    # what a live switch of the reference server is sent for each
    assert layout_body(mono.deployment) == {"layout": "monolithic", "chunked_prefill_tokens": 2048}
    assert layout_body(cross.deployment) == {"layout": "cross", "prefill_share": 0.6667,
                                             "num_prefill": 2, "num_decode": 1}


def test_a_new_recommendation_round_trips_and_names_each_setting_once(tmp_path):
    rec = Recommendation(
        Deployment("cross", num_prefill=3, num_decode=2, replicas=2, link="ib"),
        max_goodput_rps_per_device=1.25, candidates=({"label": "cross 3P2D", "layout": "cross",
                                                      "params": {"num_prefill": 3, "num_decode": 2}},),
        reasons=({"text": "prefill-heavy", "evidence": {"ratio": 80.0}},), slo=parse_slo("code"),
        confidence=Confidence(0.6, "medium", "spec-sheet profile"), margin=0.3, decision="Run it.",
        max_devices=10, workload={"name": "w", "requests": 12}, profile={"name": "p", "meta": {"model": "m"}})
    assert rec.deployment.devices == 10 and rec.model == "m"
    assert rec.to_dict()["params"] == {"num_prefill": 3, "num_decode": 2, "prefill_tp": 1,
                                       "decode_tp": 1, "replicas": 2, "link": "ib"}
    with Store.open(tmp_path / "s.db") as store:
        saved = save_recommendation(store, rec)
        back = load_recommendation(store, saved.id)
    assert back.id == saved.id == 1 and back.created_s is not None and back.host
    assert back.deployment == rec.deployment and back.slo == rec.slo
    assert (back.candidates, back.reasons, back.confidence) == (rec.candidates, rec.reasons, rec.confidence)
    assert (back.max_devices, back.workload, back.decision) == (10, {"name": "w", "requests": 12}, "Run it.")


def test_a_row_that_cannot_be_read_is_one_line_naming_it(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        bad = store.insert_recommendation({"workload": "w", "layout": "cross",
                                           "params": {"num_prefill": 0, "num_decode": 1}})
        odd = store.insert_recommendation({"workload": "w", "layout": "diagonal"})
        bare = store.insert_recommendation({"workload": "w", "layout": "intra", "prefill_share": 0.4})
        with pytest.raises(UserError, match=f"recommendation {bad}: .*num_prefill must be at least 1"):
            load_recommendation(store, bad)
        with pytest.raises(UserError, match="layout 'diagonal' is not one of monolithic, intra, cross"):
            load_recommendation(store, odd)
        with pytest.raises(UserError, match="--check 99: no such recommendation"):
            load_recommendation(store, 99, "--check")
        # a row with columns only (no body): the share from its column, the chat SLO
        got = load_recommendation(store, bare)
    assert got.deployment == Deployment("intra", prefill_share=0.4) and got.slo.tbt_s == 0.1


def test_run_decision_stores_what_it_returns(tmp_path):
    rng = np.random.default_rng(3)
    wl = pd.DataFrame({"arrival_s": rng.uniform(0, 100, 150),  # out of order: sorted once, here
                       "prompt_tokens": rng.integers(100, 800, 150),
                       "output_tokens": rng.integers(20, 200, 150)})
    opts = DecisionOptions(max_devices=2, layouts=("monolithic",), what_if=WhatIf(rate_scale=2.0, limit=120))
    with Store.open(tmp_path / "s.db") as store:
        rec = run_decision(wl, roofline_profile("llama3-8b", "h200"), parse_slo("chat"), opts, store,
                           workload_name="w")
        assert load_recommendation(store, rec.id) == rec
    assert rec.layout == "monolithic" and rec.deployment.replicas == 2
    assert rec.workload["requests"] == 120 and rec.workload["rate_scale"] == 2.0


def test_admin_client_says_unreachable():
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(AdminError, match=f"cannot reach {url}") as err:
        AdminClient(url, "t").layout()
    assert err.value.kind == "unreachable"
    with pytest.raises(AdminError) as err:  # refused before sending: nothing can have changed
        AdminClient(url, "t").switch({"layout": "intra", "prefill_share": 0.5}, "test", "why")
    assert err.value.kind == "unreachable"
