"""Forecaster: bucket convention, faults (empty, constant, gaps), backtest choice, CLI and store."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd

from gpuprobe.forecast import forecast_workload
from gpuprobe.forecast.choose import forecast_series
from gpuprobe.forecast.series import bucket_series
from gpuprobe.workloads.analyze import analyze


def _workload(n=600, rate=2.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return pd.DataFrame({"arrival_s": t - t[0], "prompt_tokens": rng.integers(50, 2000, n),
                         "output_tokens": rng.integers(10, 300, n)})


def test_buckets_match_analyze():
    df = _workload()
    mix = analyze(df, 10.0).buckets
    ours = bucket_series(df, 10.0, len(mix) * 10.0)
    for col in ("start_s", "requests_per_s", "prefill_tokens_per_s", "decode_tokens_per_s"):
        assert np.allclose(ours[col], mix[col]), col


def test_constant_and_empty_series_get_a_note_not_an_exception():
    out = forecast_series(np.full(50, 3.0), 6)
    assert out["model"] == "constant" and out["mean"] == [3.0] * 6 and "constant" in out["note"]
    assert forecast_series(np.zeros(0), 6)["mean"] == [0.0] * 6


def test_shape_asof_rounding_and_intervals_nest():
    df = _workload(1400)
    r = forecast_workload(df, 10.0, 60.0, as_of_s=605.0, series=("prefill", "decode"))
    assert r["as_of_s"] == 600.0 and any("rounded down" in n for n in r["notes"])
    s = r["series"]["prefill_tokens_per_s"]
    assert s["t_s"] == [600.0 + 10 * k for k in range(6)]
    for i in range(6):
        assert 0 <= s["lo95"][i] <= s["lo80"][i] <= s["mean"][i] <= s["hi80"][i] <= s["hi95"][i]
    assert sum(b["chosen"] for b in r["backtest"] if b["series"] == "prefill_tokens_per_s" and "mae" in b) == 1


def test_gap_and_burst_are_handled():
    df = _workload()
    df = df[(df.arrival_s < 100) | (df.arrival_s > 200)]  # a 100 s gap
    df = pd.concat([df, pd.DataFrame({"arrival_s": np.full(50, 250.0), "prompt_tokens": 8000,
                                      "output_tokens": 10})]).sort_values("arrival_s")
    r = forecast_workload(df, 10.0, 60.0)
    assert all(np.isfinite(r["series"][k]["mean"]).all() for k in r["series"])


def test_seasonal_series_beats_seasonal_naive():
    rng = np.random.default_rng(1)
    t = np.arange(24 * 12)
    y = 100 + 50 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 5, t.size)
    out = forecast_series(y, 6)
    assert out["period"] == 24
    rows = {b["model"]: b for b in out["backtest"] if "mae" in b}
    chosen = next(b for b in rows.values() if b["chosen"])
    assert chosen["mae"] <= rows["seasonal_naive(24)"]["mae"]


def test_cli_json_and_store(tmp_path):
    path = tmp_path / "w.csv"
    df = _workload(400)
    pd.DataFrame({"TIMESTAMP": pd.Timestamp("2024-01-01") + pd.to_timedelta(df.arrival_s, unit="s"),
                  "ContextTokens": df.prompt_tokens, "GeneratedTokens": df.output_tokens}).to_csv(path, index=False)
    db = tmp_path / "s.db"
    p = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(db), "forecast", "--workload", str(path),
                        "--json", "--series", "prefill"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert set(r["series"]) == {"prefill_tokens_per_s"} and r["forecast_id"]
    from gpuprobe.store import Store
    with Store.open(db) as store:
        assert len(store.forecasts(forecast_id=r["forecast_id"])) == 6
    bad = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(db), "forecast", "--workload", str(path),
                          "--series", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
