"""recommend --forecast: the coming load (upper 80% of requests/s) and mix as a workload, and
when the best layout is expected to change. The forecast is hand-built in the forecaster's
documented shape (gpuprobe forecast --json), as a file."""
import json

import numpy as np
import pandas as pd
import pytest

from gpuprobe.cli.main import main
from gpuprobe.decide.forecast_workload import workload_from_forecast
from gpuprobe.errors import UserError
from gpuprobe.perf.roofline import roofline_profile

pytestmark = pytest.mark.timeout(180)


def _series(values, spread=0.2):
    v = np.asarray(values, dtype=float)
    return {"model": "hand-built", "t_s": [600.0 + 10 * i for i in range(len(v))], "mean": v.tolist(),
            "lo80": (v * (1 - spread)).tolist(), "hi80": (v * (1 + spread)).tolist(),
            "lo95": (v * (1 - 2 * spread)).tolist(), "hi95": (v * (1 + 2 * spread)).tolist()}


def _forecast(rps, prompt, output):
    rps = np.asarray(rps, dtype=float)
    return {"bucket_s": 10.0, "as_of_s": 600.0, "horizon_s": 10.0 * len(rps),
            "series": {"requests_per_s": _series(rps), "prefill_tokens_per_s": _series(rps * prompt),
                       "decode_tokens_per_s": _series(rps * output)}}


def _recent(n=300):
    rng = np.random.default_rng(0)
    return pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, 100, n)),
                         "prompt_tokens": rng.integers(100, 1500, n),
                         "output_tokens": rng.integers(20, 300, n)})


def test_forecast_workload_takes_hi80_rate_and_forecast_mix():
    prompt = np.array([4000.0] * 3 + [100.0] * 3)
    output = np.array([20.0] * 3 + [500.0] * 3)
    wl = workload_from_forecast(_recent(), _forecast([8.0] * 6, prompt, output), min_requests=1)
    per = wl.groupby("bucket").agg(n=("arrival_s", "size"), p=("prompt_tokens", "mean"),
                                   o=("output_tokens", "mean"))
    assert (per["n"] == round(8.0 * 1.2 * 10)).all()  # hi80 of 8 req/s over 10 s buckets
    assert per["p"].iloc[0] == pytest.approx(4000, rel=0.05) and per["o"].iloc[-1] == pytest.approx(500, rel=0.05)
    assert wl["arrival_s"].is_monotonic_increasing and wl["arrival_s"].max() < 60
    with pytest.raises(UserError):
        workload_from_forecast(_recent(), {"series": {"requests_per_s": _series([1.0])}})


def test_recommend_forecast_file_says_when_the_best_layout_changes(capsys, tmp_path):
    trace, prof, fc = tmp_path / "t.csv", tmp_path / "p.json", tmp_path / "f.json"
    _recent().to_csv(trace, index=False)
    prof.write_text(roofline_profile("llama3-8b", "h200").dumps())
    prompt = np.array([6000.0] * 3 + [100.0] * 3)
    output = np.array([15.0] * 3 + [700.0] * 3)
    fc.write_text(json.dumps(_forecast([6.0] * 6, prompt, output)))
    rc = main(["recommend", "--workload", str(trace), "--profile", str(prof), "--store",
               str(tmp_path / "g.db"), "--forecast-file", str(fc), "--devices", "4", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    rec = json.loads(out)
    f = rec["forecast"]
    assert len(f["buckets"]) == 6 and f["buckets"][0]["prompt_output_ratio"] == pytest.approx(400)
    firsts, lasts = {b["best"] for b in f["buckets"][:3]}, {b["best"] for b in f["buckets"][3:]}
    assert None not in firsts | lasts and firsts.isdisjoint(lasts)
    assert f["changes"] and f["changes"][0]["t_s"] == pytest.approx(630.0)
    assert rec["workload"]["forecast"] is True and rec["workload"]["rate_bound"] == "hi80"
