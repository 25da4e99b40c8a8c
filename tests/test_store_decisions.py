"""The decision tables (schema 5): recommendations with ids, forecasts with origins,
validate results, the autopilot's audit log."""
from gpuprobe.store import Store


def test_recommendation_round_trip_and_applied(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        rid = store.insert_recommendation({
            "workload": "w", "layout": "cross", "params": {"x": 1, "y": 2},
            "candidates": [{"layout": "cross", "max_goodput_rps_per_device": 3.5}],
            "reasons": [{"text": "decode-heavy", "evidence": {"ratio": 0.1}}],
            "confidence": 0.8, "confidence_label": "high", "margin": 0.2})
        second = store.insert_recommendation({"workload": "w", "layout": "monolithic"})
        assert second == rid + 1
        rec = store.recommendation(rid)
        assert rec["id"] == rid and rec["params"] == {"x": 1, "y": 2}
        assert rec["reasons"][0]["evidence"]["ratio"] == 0.1 and rec["applied_s"] is None
        store.mark_recommendation_applied(rid, "http://h:1", ts_s=5.0)
        rec = store.recommendation(rid)
        assert (rec["applied_s"], rec["applied_target"]) == (5.0, "http://h:1")
        assert store.recommendation(999) is None
        assert list(store.recommendations("w")["layout"]) == ["cross", "monolithic"]


def test_forecast_rows_by_id(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        rows = [{"created_s": 1.0, "workload": "w", "model": "ets", "forecast_id": f, "as_of_s": 60.0,
                 "bucket_s": 10.0, "horizon_s": 20.0, "metric": "requests_per_s", "target_s": t,
                 "value": 1.0, "lo80": 0.5, "hi80": 1.5, "lo95": 0.2, "hi95": 1.8}
                for f in ("a", "b") for t in (60.0, 70.0)]
        assert store.insert_forecasts(rows) == 4
        got = store.forecasts(forecast_id="b")
        assert list(got["target_s"]) == [60.0, 70.0] and set(got["forecast_id"]) == {"b"}


def test_decision_outcome_and_validations(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        did = store.insert_decision({"target": "http://t", "action": "hold", "reason": "dwell",
                                     "candidates": [{"layout": "intra"}]})
        store.set_decision_outcome(did, {"ttft_p99_s": 0.3})
        d = store.decisions("http://t").iloc[0]
        assert d["action"] == "hold" and '"ttft_p99_s": 0.3' in d["outcome"]
        store.insert_validation({"workload": "w", "best_measured": "intra", "bar_met": 1,
                                 "body": {"layouts": {}}})
        assert store.validations("w")["best_measured"].tolist() == ["intra"]

