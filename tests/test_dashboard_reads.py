"""What the dashboard reads and writes outside Streamlit: the store's read helpers, the agent's
dropped samples stored as events, the Apply call's request body and errors, and the command's
bad input."""
import asyncio
import sqlite3
import subprocess
import sys
import threading

import numpy as np
import pytest

from dashboard_fill import NUM_REQUESTS, SPAN_S, T0, fill
from gpuprobe.collectors import config
from gpuprobe.collectors.agent import Agent
from gpuprobe.dashboard import queries
from gpuprobe.dashboard.apply import apply
from gpuprobe.deploy.admin_client import AdminError
from gpuprobe.errors import UserError
from gpuprobe.store import Sample, Store
from gpuprobe.store.reads import data_version, request_buckets, request_span, sample_span


def test_request_buckets_count_every_request_and_rate_is_per_second(tmp_path):
    store = fill(tmp_path / "s.db")
    df = request_buckets(store, T0, T0 + SPAN_S, 60)
    assert df["num_requests"].sum() == NUM_REQUESTS
    width = SPAN_S / 60
    assert np.allclose(df["requests_per_s"] * width, df["num_requests"])
    assert np.allclose(df["prefill_tokens_per_s"] * width, df["num_requests"] * 200)
    assert (df["ttft_p99_s"] == 0.05).all() and (df["tbt_p99_s"] == 0.04).all()
    assert request_buckets(store, T0 + 2 * SPAN_S, T0 + 3 * SPAN_S, 60).empty


def test_a_long_series_is_downsampled_to_at_most_max_points(tmp_path):
    store = Store.open(tmp_path / "s.db")
    n = 3 * 3600 * 2  # 3 h at 2 Hz
    store.insert_samples(Sample(T0 + i / 2, "h", "gpm", "gpu0", "sm_util_pct", float(i % 100)) for i in range(n))
    span = sample_span(store)
    assert span == (T0, T0 + (n - 1) / 2)
    panels = queries.counter_panels(store, *span, 2000, None, ())
    (trace,) = panels[0]["traces"]
    assert 1000 < len(trace["ts_s"]) <= 2000
    assert panels[0]["title"] == "SM activity"


def test_data_version_changes_with_any_new_row_or_mark(tmp_path):
    store = fill(tmp_path / "s.db")
    v0 = data_version(store)
    assert data_version(store) == v0
    store.insert_requests([{"source": "tap", "request_id": "x", "arrival_s": T0 + 1}])
    v1 = data_version(store)
    store.mark_recommendation_applied(1, "http://x")
    v2 = data_version(store)
    assert len({v0, v1, v2}) == 3
    assert request_span(store, "tap") == (T0 + 1, T0 + 1)


def test_agent_stores_dropped_samples_as_events(tmp_path):
    db = tmp_path / "a.db"
    with Store.open(db, busy_timeout_s=0.05) as store:
        locker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        locker.execute("BEGIN IMMEDIATE")  # another writer holds the store: the agent's writes fail
        threading.Timer(1.0, lambda: locker.execute("COMMIT")).start()
        cfg = config.AgentConfig(metrics_port=None, flush_interval=0.05, max_buffer_samples=100, duration=2.0,
                                 intervals=config.Intervals(host=0.05, nvml=0, gpm=0, proc=0))
        stats = asyncio.run(Agent(cfg, store, log=lambda m: None, host="node9").run())
        events = store.events(source="agent")
    locker.close()
    assert stats.num_dropped > 0
    assert set(events["kind"]) == {"samples_dropped"} and set(events["host"]) == {"node9"}
    assert len(events) == 1  # one event for the whole outage, not one per flush
    counted = sum(int(m.split()[1]) for m in events["message"])  # "dropped N samples, ..."
    assert counted == stats.num_dropped
    assert "locked" in events["message"].iloc[0]


def test_apply_to_a_closed_port_is_one_line_and_marks_nothing(tmp_path):
    fill(tmp_path / "s.db").close()
    with pytest.raises(AdminError, match=r"cannot reach http://127.0.0.1:9") as err:
        apply(str(tmp_path / "s.db"), 1, "http://127.0.0.1:9", "t")
    assert err.value.kind == "unreachable"
    with pytest.raises(UserError, match="give the server's URL"):
        apply(str(tmp_path / "s.db"), 1, "127.0.0.1:8000", "t")
    with Store.open(tmp_path / "s.db", read_only=True) as store:
        assert store.recommendation(1)["applied_s"] is None


def gpuprobe(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


def test_dashboard_command_refuses_a_missing_store_and_a_bad_port(tmp_path):
    done = gpuprobe("dashboard", "--store", str(tmp_path / "none.db"))
    assert done.returncode == 2 and "no store at" in done.stderr and len(done.stderr.splitlines()) == 1
    (tmp_path / "notes.db").write_text("not a database")
    done = gpuprobe("dashboard", "--store", str(tmp_path / "notes.db"))
    assert done.returncode == 2 and "notes.db" in done.stderr and len(done.stderr.splitlines()) == 1
    assert (tmp_path / "notes.db").read_text() == "not a database"  # untouched
    done = gpuprobe("dashboard", "--port", "99999")
    assert done.returncode == 2 and "--port" in done.stderr


def test_dashboard_command_always_names_the_address():
    from gpuprobe.cli.commands.dashboard import command
    cmd = command("/x.db", "127.0.0.1", 8600)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8600" and cmd[-1] != "run"


def test_store_forecast_keeps_each_series_backtest_for_the_forecast_page(tmp_path):
    from gpuprobe.forecast.persist import note_backtest, note_text, store_forecast
    bt = [{"series": s, "model": m, "mae": np.float64(mae), "chosen": m == "ets", "fit_s": 0.2}
          for s in ("requests_per_s", "decode_tokens_per_s") for m, mae in (("ets", 1.0), ("last", 2.0))]
    series = {s: {"model": "ets", "note": f"{s}: no seasonality", "t_s": [60.0, 120.0], "mean": [1.0, 2.0],
                  "lo80": [0.5, 1.0], "hi80": [1.5, 3.0], "lo95": [0.1, 0.2], "hi95": [2.0, 4.0]}
              for s in ("requests_per_s", "decode_tokens_per_s")}
    with Store.open(tmp_path / "f.db") as store:
        fid = store_forecast(store, {"as_of_s": 60.0, "bucket_s": 60.0, "horizon_s": 120.0, "series": series,
                                     "backtest": bt}, "wl")
        rows = store.forecasts(forecast_id=fid)
    assert len(rows) == 4
    req = rows[rows["metric"] == "requests_per_s"]["note"]
    assert {note_text(n) for n in req} == {"requests_per_s: no seasonality"}
    assert [(b["model"], b["mae"], b["chosen"]) for b in note_backtest(req.iloc[0])] == [("ets", 1.0, True),
                                                                                         ("last", 2.0, False)]
    assert note_text("older plain note") == "older plain note" and note_backtest("older plain note") == []


def test_a_servers_first_layout_is_marked_as_its_start(tmp_path):
    from gpuprobe.dashboard.charts import switch_marks
    with Store.open(tmp_path / "s.db") as store:
        store.insert_layout_events([{"ts_s": T0, "to_layout": "monolithic", "actor": "serve"},
                                    {"ts_s": T0 + 60, "from_layout": "monolithic", "to_layout": "intra", "actor": "admin"}])
        ev = queries.layout_switches(store)
    shapes, notes = switch_marks(ev, 2, (T0, T0 + 120))
    assert len(shapes) == 4 and [n["text"].strip() for n in notes] == ["start: monolithic", "monolithic -> intra"]
