"""Every dashboard page through Streamlit's AppTest, on an empty store, on a filled one, and on
the partial stores a user meets first (only host samples, a workload without requests):
the figures and rows that matter are asserted, and no page raises."""
import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard_demo_check import basic_charts  # the figures Overview and Live draw (plotly.js basic)
from dashboard_fill import NUM_REQUESTS, SWITCH_S, T0, fill
from gpuprobe.store import Sample, Store

PAGES = Path(__file__).resolve().parent.parent / "dashboard" / "views"
NAMES = ("overview", "live", "workload", "model", "forecast", "recommend", "reports")


def page(name: str, store_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("GPUPROBE_STORE", str(store_path))
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    path = tmp_path_factory.mktemp("dash") / "filled.db"
    fill(path).close()
    return path


@pytest.mark.parametrize("name", NAMES)
def test_empty_store_says_what_is_missing_and_how_to_fill_it(name, tmp_path, monkeypatch):
    Store.open(tmp_path / "empty.db").close()
    at = page(name, tmp_path / "empty.db", monkeypatch)
    said = texts(at.info) + texts(at.warning)
    assert "gpuprobe" in said  # the command that fills it
    assert not at.error


def test_missing_store_file_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    at = page("overview", tmp_path / "nope.db", monkeypatch)
    assert "No gpuprobe store at" in texts(at.error) and "gpuprobe demo" in texts(at.error)


def test_overview_counts_hosts_gpus_layout_recommendation_and_alerts(filled, monkeypatch):
    at = page("overview", filled, monkeypatch)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Hosts"] == "1" and metrics["GPUs"] == "2"
    assert metrics["Current layout"] == "intra"  # the last switch, not the layout serve started with
    assert metrics["Goodput per device"] == "3.25 req/s"
    assert metrics["Expected gain over the runner-up"] == "18.0%"
    assert "gpu1 (GPU-x) lost" in texts(at.error)
    assert "dropped 500 samples" in texts(at.warning)
    glance = basic_charts(at)[0]  # the last hour: SM activity, request rate
    assert [a["text"].split("<")[1] for a in glance["layout"]["annotations"][:2]] == ["b>SM activity", "b>Request rate (server)"]


def test_overview_alerts_when_tbt_nears_the_slo(tmp_path, monkeypatch):
    store = fill(tmp_path / "slow.db")
    store.insert_requests([{"source": "server", "request_id": f"s{i}", "arrival_s": T0 + 700 + i,
                            "ttft_s": 0.1, "tbt_p50_s": 0.15, "status": "ok"} for i in range(20)])
    store.close()
    at = page("overview", tmp_path / "slow.db", monkeypatch)
    assert "TBT SLO at risk" in texts(at.error) and "150.0 ms" in texts(at.error)  # SLO 100 ms


def values(arr) -> np.ndarray:
    """A trace's values from the figure's JSON: a list, or plotly's typed array (base64)."""
    if isinstance(arr, dict):
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
    return np.asarray(arr, dtype=float)


def live_spec(at) -> dict:
    charts = basic_charts(at)
    assert len(charts) == 1 and not at.get("plotly_chart")
    return charts[0]


def test_live_panels_share_one_axis_with_the_switch_on_every_panel(filled, monkeypatch):
    at = page("live", filled, monkeypatch)
    spec = live_spec(at)
    axes = [k for k in spec["layout"] if k.startswith("yaxis")]
    assert len(axes) == 12  # 6 GPU, 2 host, 4 request panels
    switches = [s for s in spec["layout"]["shapes"] if s["line"].get("dash") == "dash"]
    assert len(switches) == len(axes)
    assert all(s["x0"] == SWITCH_S * 1000 for s in switches)  # epoch ms on a date axis
    gpu_traces = [t for t in spec["data"] if t["yaxis"] == "y"]  # the top panel: SM activity
    assert sorted(t["name"] for t in gpu_traces) == ["gpu0", "gpu1"]
    assert all(len(values(t["y"])) <= 2000 for t in spec["data"])
    rate = next(t for t in spec["data"] if t["name"] == "arrivals")
    xaxes = [v for k, v in spec["layout"].items() if k.startswith("xaxis")]
    assert len({a.get("matches") for a in xaxes if a.get("matches")}) == 1  # one axis: zoom one, zoom all
    assert sum(1 for a in xaxes if a.get("matches")) == len(xaxes) - 1
    y, x_ms = values(rate["y"]), values(rate["x"])
    width_s = np.diff(x_ms).min() / 1000
    assert y.sum() * width_s == pytest.approx(NUM_REQUESTS)  # req/s x bucket width = requests


def test_live_redraws_with_new_data(filled, tmp_path, monkeypatch):
    path = tmp_path / "grow.db"
    fill(path).close()
    at = page("live", path, monkeypatch)
    before = texts(at.caption)
    with Store.open(path) as store:
        store.insert_samples([Sample(T0 + 900, "node-a", "gpm", "gpu0", "sm_util_pct", 99.0)])
    at.run()
    assert not at.exception
    after = texts(at.caption)
    assert before != after and "22:28:20" in after  # the cache saw the new row: newest is T0 + 900


def test_live_on_host_samples_only_names_the_missing_gpu_and_requests(tmp_path, monkeypatch):
    fill(tmp_path / "host.db", gpus=False, requests=False).close()
    at = page("live", tmp_path / "host.db", monkeypatch)
    said = texts(at.info)
    assert "No GPU counters" in said and "gpuprobe agent" in said
    assert "No requests recorded" in said and "gpuprobe replay" in said
    assert len([k for k in live_spec(at)["layout"] if k.startswith("yaxis")]) == 2  # host CPU and memory
    ov = page("overview", tmp_path / "host.db", monkeypatch)
    assert {m.label: m.value for m in ov.metric}["GPUs"] == "0"
    assert "No GPU samples" in texts(ov.info)


def test_workload_two_side_by_side_and_one_without_requests(filled, tmp_path, monkeypatch):
    at = page("workload", filled, monkeypatch)
    assert [s.value for s in at.selectbox] == ["wl-shift", "wl-steady"]
    assert [m.value for m in at.metric if m.label == "Requests"] == ["300", "300"]
    assert len(at.get("plotly_chart")) == 6  # mix and two histograms each
    assert "none" not in texts(at.caption).split("\n")[0]  # wl-shift's shift at 300 s is found
    with Store.open(tmp_path / "w.db") as store:
        store.save_workload("nothing", pd.DataFrame({"arrival_s": [], "prompt_tokens": [], "output_tokens": []}))
    at = page("workload", tmp_path / "w.db", monkeypatch)
    assert "has no requests" in texts(at.info)


def test_model_shows_predicted_against_measured_with_spread(filled, monkeypatch):
    at = page("model", filled, monkeypatch)
    assert {m.label: m.value for m in at.metric}["Best measured"] == "monolithic"
    table = at.dataframe[0].value
    assert len(table) == 4 and set(table["layout"]) == {"monolithic", "intra"}
    assert "0.095 .. 0.105" in set(table["replay_spread"])
    assert len(at.get("plotly_chart")) == 1


def test_forecast_series_with_intervals_and_model(filled, monkeypatch):
    at = page("forecast", filled, monkeypatch)
    models = at.dataframe[0].value
    assert sorted(models["metric"]) == ["decode_tokens_per_s", "prefill_tokens_per_s"]
    assert set(models["model"]) == {"ets"}
    assert set(models["note"]) == {"seasonality: none found"}  # plain and JSON notes read alike
    backtest = at.dataframe[1].value  # the table store_forecast keeps beside the forecast
    assert list(backtest["model"]) == ["ets", "ma3"] and list(backtest["chosen"]) == [True, False]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 2
    names = {t["name"] for t in charts[0]["data"]}
    assert {"95% interval", "80% interval", "forecast", "history"} <= names


def test_recommend_ranks_candidates_and_lists_reasons_plans_and_log(filled, monkeypatch):
    at = page("recommend", filled, monkeypatch)
    cands = at.dataframe[0].value
    assert list(cands["layout"]) == ["intra", "monolithic", "cross"]
    assert list(cands["rank"]) == [1, 2, 3]
    assert "prompt:output ratio 5.2" in texts(at.markdown)
    assert [t.label for t in at.tabs] == ["vllm", "sglang", "dynamo", "gpuprobe"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70" in texts(at.code)  # intra at 70% prefill
    log = at.dataframe[1].value
    assert list(log["chosen_layout"]) == ["intra"] and list(log["action"]) == ["switch"]


def test_recommend_keeps_the_ranking_rules_order_not_goodputs(tmp_path, monkeypatch):
    from gpuprobe.decide.rank import rank
    cand = {"tbt_p99_s": 0.05, "slo_attainment": 0.99}
    ranked = rank([{"layout": "intra", "simplicity": 1, "max_goodput_rps_per_device": 3.25, **cand},
                   {"layout": "monolithic", "simplicity": 0, "max_goodput_rps_per_device": 3.2, **cand}])
    assert [c["layout"] for c in ranked] == ["monolithic", "intra"]  # within 5%: the simpler first
    with Store.open(tmp_path / "tie.db") as store:
        store.insert_recommendation({"workload": "w", "layout": "monolithic", "params": {},
                                     "candidates": ranked})
    at = page("recommend", tmp_path / "tie.db", monkeypatch)
    assert list(at.dataframe[0].value["layout"]) == ["monolithic", "intra"]


def test_recommend_without_a_model_builds_each_engines_plans(tmp_path, monkeypatch):
    with Store.open(tmp_path / "p.db") as store:
        store.insert_recommendation({"workload": "w", "layout": "intra", "prefill_share": 0.7,
                                     "params": {"prefill_share": 0.7}})
    at = page("recommend", tmp_path / "p.db", monkeypatch)
    assert [t.label for t in at.tabs] == ["vllm", "sglang", "dynamo", "gpuprobe"]
    assert "/admin/layout" in texts(at.code) and "MODEL" in texts(at.code)
    assert "names no model" in texts(at.info)


def test_apply_to_an_unreachable_server_changes_nothing(filled, monkeypatch):
    at = page("recommend", filled, monkeypatch)
    at.text_input[0].set_value("http://127.0.0.1:9")
    at.text_input[1].set_value("secret")
    at.checkbox[0].check()
    at.button[0].click().run()
    assert "Not applied: cannot reach http://127.0.0.1:9" in texts(at.error)
    with Store.open(filled, read_only=True) as store:
        assert store.recommendation(1)["applied_s"] is None


def test_apply_asks_for_confirmation(filled, monkeypatch):
    at = page("recommend", filled, monkeypatch)
    at.text_input[1].set_value("secret")
    at.button[0].click().run()
    assert "Tick the confirmation" in texts(at.warning)


def test_reports_generates_the_report(filled, monkeypatch):
    at = page("reports", filled, monkeypatch)
    assert at.button[0].label == "Generate report"
    at.button[0].click().run(timeout=120)
    assert not at.exception and "Written" in texts(at.success)
    # what the filled store lacks, as `gpuprobe report` says it, from the library's own result
    assert texts(at.warning) == ("partial: missing GPU counters beside served requests, measured interference "
                                 "(engine steps) (the report names the commands that fill them)")
    assert "Download the report (HTML)" in [b.label for b in at.get("download_button")]


def test_reports_lists_the_reports_beside_the_store(tmp_path, monkeypatch):
    fill(tmp_path / "r.db", gpus=False, requests=False).close()
    (tmp_path / "report.html").write_text("<html>the demo's report</html>")
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.4")
    at = page("reports", tmp_path / "r.db", monkeypatch)
    labels = [b.label for b in at.get("download_button")]
    assert sorted(label.split(" ")[0] for label in labels) == ["report.html", "report.pdf"]
    assert at.button[0].label == "Generate report"
