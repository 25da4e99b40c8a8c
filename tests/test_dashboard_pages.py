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
NAMES = ("overview", "live", "workload", "accuracy", "forecast", "recommend", "reports")


def page(name: str, store_path, monkeypatch) -> AppTest:
    monkeypatch.setenv("GPUPROBE_STORE", str(store_path))
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


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
    # over the best other layout, from the candidates of a row stored before the margin was
    assert metrics["Margin over the best other layout"] == "+18%"
    said = texts(at.markdown)
    assert "Run intra (70% of each device prefills, the rest decodes) on 1 device: 3.25 req/s per device" in said
    assert "18% more than the best other layout, monolithic (2.75 req/s per device)" in said
    # the validate on the same workload measured monolithic best: said, with both figures
    assert ("measured monolithic best: 100% of requests within the SLO, against intra's 90% of requests "
            "within the SLO (+10 points of attainment)") in texts(at.warning)
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


def test_accuracy_shows_predicted_against_measured_with_spread(filled, monkeypatch):
    at = page("accuracy", filled, monkeypatch)
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
    button(at, "Apply").click().run()
    assert "Not applied: cannot reach http://127.0.0.1:9" in texts(at.error)
    assert texts(at.error).count("othing was changed") == 1  # said once
    with Store.open(filled, read_only=True) as store:
        assert store.recommendation(1)["applied_s"] is None


def test_apply_asks_for_confirmation(filled, monkeypatch):
    at = page("recommend", filled, monkeypatch)
    at.text_input[1].set_value("secret")
    button(at, "Apply").click().run()
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


def test_live_panels_each_have_a_legend_a_time_axis_and_the_slo(filled, monkeypatch):
    spec = live_spec(page("live", filled, monkeypatch))
    xaxes = [v for k, v in spec["layout"].items() if k.startswith("xaxis")]
    assert all(a["showticklabels"] for a in xaxes) and "local time" in xaxes[-1]["title"]["text"]
    titles = [a["text"] for a in spec["layout"]["annotations"] if a["text"].startswith("<b>")]
    ttft = next(t for t in titles if t.startswith("<b>TTFT"))
    assert "p50</span>" in ttft and "p99</span>" in ttft  # the panel's own legend
    # the recommendation's SLO (TTFT 2 s, TPOT 100 ms) as a dotted line on the TTFT and TBT panels
    slo = sorted(s["y0"] for s in spec["layout"]["shapes"] if s["line"].get("dash") == "dot")
    assert slo == [100.0, 2000.0]


def test_drift_after_apply_is_warned_on_both_pages(tmp_path, monkeypatch):
    store = fill(tmp_path / "d.db")
    store.mark_recommendation_applied(1, "http://127.0.0.1:8000", ts_s=T0 + 400)
    store.insert_layout_events([{"ts_s": T0 + 500, "host": "node-a", "from_layout": "intra", "to_layout": "cross",
                                 "prefill_share": 0.5, "actor": "admin", "status": "ok"}])
    store.close()
    for name in ("overview", "recommend"):
        said = texts(page(name, tmp_path / "d.db", monkeypatch).warning)
        assert "Drift: http://127.0.0.1:8000 runs cross with 50% prefill since" in said, (name, said)
        assert "(switched by admin), not recommendation 1's intra 70% prefill" in said


def test_what_if_asks_again_for_another_gpu_and_draws_each_candidate(filled, monkeypatch):
    at = page("recommend", filled, monkeypatch)
    gpu = next(s for s in at.selectbox if s.label == "GPU")
    gpu.set_value("h100")
    next(n for n in at.number_input if n.label == "TTFT target (s)").set_value(0.5)
    button(at, "Ask again").click().run(timeout=120)
    assert not at.exception
    said = texts(at.markdown)
    assert said.count("Run ") >= 2 and "a first token within 500 ms" in said  # the stored answer, then the what-if's
    chart = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "what-if" in c.proto.id][0]
    chosen = [t for t in chart["data"] if t["name"] == "chosen"]
    assert len(chosen) == 2 and all(len(t["x"]) == 1 for t in chosen)  # marked on both panels
    assert chart["layout"]["xaxis"]["title"]["text"].startswith("TTFT p99")


def test_forecast_bands_are_one_forecasts_and_skip_steps_without_bounds(tmp_path):
    from gpuprobe.dashboard import charts, queries
    from gpuprobe.forecast.bands import band_outline
    with Store.open(tmp_path / "f.db") as store:  # two forecasts stored without an id, at 1 and 2
        store.insert_forecasts([{"created_s": c, "workload": "w", "model": "ets", "metric": "decode_tokens_per_s",
                                 "target_s": 60.0 * k, "value": v, "lo80": v - 50, "hi80": v + 50,
                                 "lo95": np.nan if (c, k) == (2.0, 3) else v - 90, "hi95": v + 90,
                                 "as_of_s": 0.0, "bucket_s": 60.0, "horizon_s": 300.0}
                                for c, v in ((1.0, 0.0), (2.0, 1000.0)) for k in range(1, 6)])
        rows = queries.forecast(store, None, 2.0)
    assert len(rows) == 5 and set(rows["value"]) == {1000.0}  # not the other forecast's zeros
    fig = charts.forecast_figure(rows, None, "decode_tokens_per_s")
    band95, band80 = (next(t for t in fig.data if t.name == n) for n in ("95% interval", "80% interval"))
    assert min(band95.y) == 910.0 and len(band95.x) == 8  # the step without a 95% bound is left out
    assert min(band80.y) == 950.0 and max(band80.y) <= max(band95.y)
    assert fig.layout.yaxis.title.text == "decode tokens per s (tokens/s)"
    xs, ys = band_outline([1, 2], [np.nan, 1], [np.nan, 2])
    assert list(xs) == [2, 2] and list(ys) == [2, 1]
