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


def test_period_is_refined_past_the_flat_autocorrelation_peak():
    from gpuprobe.forecast.seasonality import find_period
    rng = np.random.default_rng(2)
    t = np.arange(12 * 300)
    y = 100 + 40 * np.sin(2 * np.pi * t / 300) + rng.normal(0, 20, t.size)
    assert abs(find_period(y)[0] - 300) <= 3  # the autocorrelation alone stopped at ~280


def test_near_equal_candidates_are_averaged_and_one_row_is_chosen():
    y = np.random.default_rng(3).poisson(50, 400).astype(float)  # white noise: the smoothers tie
    out = forecast_series(y, 6)
    chosen = [b for b in out["backtest"] if b.get("chosen")]
    assert len(chosen) == 1
    if chosen[0]["kind"] == "combination":
        assert out["model"].startswith("mean(") and "their mean" in out["note"]
        members = out["model"][5:-1].split(", ")
        maes = {b["model"]: b["mae"] for b in out["backtest"] if "mae" in b}
        assert all(maes[m] <= 1.10 * min(maes.values()) for m in members)


def test_intervals_follow_the_recent_spread_not_an_old_burst():
    rng = np.random.default_rng(4)
    y = np.concatenate([100 + rng.normal(0, 40, 300), 100 + rng.normal(0, 5, 100)]).clip(0)
    out = forecast_series(y, 6)
    width = np.array(out["hi80"]) - np.array(out["lo80"])
    assert out["interval"] == "conformal" and "scaled by the spread" in out["note"]
    assert (width < 2 * 1.28 * 5 * 2).all(), width  # an unscaled band from the burst: ~100 wide


def test_evaluate_frame_sees_what_as_of_sees():
    from gpuprobe.forecast.evaluate import evaluate_frame
    df = _workload(1400)
    full = bucket_series(df, 10.0, (np.floor(df.arrival_s.max() / 10) + 1) * 10)
    table = evaluate_frame(full, 10.0, 60.0, [500.0], series=("decode",))
    direct = forecast_workload(df, 10.0, 60.0, as_of_s=500.0, series=("decode",))["series"]["decode_tokens_per_s"]
    actual = full["decode_tokens_per_s"].to_numpy()[50:56]
    assert np.isclose(table.loc[0, "mae"], np.mean(np.abs(actual - np.array(direct["mean"]))))


def test_azure_conv_at_60s_starts_from_the_last_whole_bucket_and_bands_nest(tmp_path):
    """The trace ends 21.7 s into its last 60 s bucket: that bucket read as 0.2 req/s (the
    load was ~4) and the forecast climbed from there. History now ends at the last whole bucket,
    and every stored row's 95% band holds its 80% band."""
    db = tmp_path / "s.db"
    p = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "--store", str(db), "forecast", "--workload",
                        "azure-conv", "--bucket", "60s", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    from gpuprobe.store import Store
    from gpuprobe.workloads.loading import load_workload
    span = float(load_workload(None, "azure-conv")["arrival_s"].max())
    assert r["as_of_s"] == (span // 60) * 60 and r["as_of_s"] < span
    assert any("last whole bucket" in n for n in r["notes"])
    frame = bucket_series(load_workload(None, "azure-conv"), 60.0, r["as_of_s"])
    recent = frame["requests_per_s"].iloc[-5:].mean()
    assert 0.5 * recent < r["series"]["requests_per_s"]["mean"][0] < 2 * recent
    with Store.open(db) as store:
        rows = store.forecasts(forecast_id=r["forecast_id"])
    assert len(rows) == 3 and rows["metric"].nunique() == 3
    assert ((rows["lo95"] <= rows["lo80"]) & (rows["lo80"] <= rows["value"]) & (rows["value"] <= rows["hi80"])
            & (rows["hi80"] <= rows["hi95"])).all()


def test_bands_nest_on_short_noisy_series():
    rng = np.random.default_rng(5)
    for seed in range(20):
        y = rng.gamma(1.0 + seed % 4, 100.0, 40 + seed) * (rng.random(40 + seed) > 0.3)
        out = forecast_series(y, 6)
        for i in range(6):
            assert out["lo95"][i] <= out["lo80"][i] <= out["mean"][i] <= out["hi80"][i] <= out["hi95"][i], (seed, i)
