"""validate on a small case: the model's accuracy, not only the JSON's shape, and one
prediction path (simulate on validate's profile predicts what validate predicted)."""
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

SMALL_SWEEPS = (("prefill_sizes", (16, 32, 64, 128, 256)), ("reps", 1),
                ("decode_batches", (1, 2, 4, 8, 16)), ("decode_prompts", (32,)),
                ("decode_tokens", 8))


def _workload(path) -> float:
    """24 requests, Poisson at 1.25 req/s, short prompts and outputs; returns the mean rate, so
    that `validate --rate` replays the arrivals as they are (speed 1, no gap cut)."""
    rng = np.random.default_rng(7)
    t = np.r_[0.0, np.cumsum(rng.exponential(0.8, 23))]
    wl = pd.DataFrame({"arrival_s": t.round(3), "prompt_tokens": rng.integers(16, 200, 24),
                       "output_tokens": rng.integers(4, 24, 24)})
    wl.to_csv(path, index=False)
    return (len(t) - 1) / float(wl["arrival_s"].iloc[-1])


@pytest.mark.slow
@pytest.mark.solo  # its bar needs a quiet machine: `make test` runs it after the rest, alone
@pytest.mark.timeout(600)
def test_validate_is_accurate_on_a_small_case_and_simulate_predicts_the_same(
        tmp_path, monkeypatch, capsys):
    from gpuprobe.cli import main as cli
    from gpuprobe.cli.commands import validate as cmd
    from gpuprobe.validate.cpu_watch import QUIET_CORES
    from gpuprobe.validate.verdict import BAR

    csv = tmp_path / "small.csv"
    rate = _workload(csv)
    real = cmd._options  # smaller calibration sweeps than the CLI's, as the other tests use
    monkeypatch.setattr(cmd, "_options", lambda args: replace(real(args), calibration=SMALL_SWEEPS,
                                                              quiet_wait_s=0.0))
    store, prof = str(tmp_path / "s.db"), str(tmp_path / "profile.json")
    args = ["validate", "--store", store, "--workload", str(csv), "--layouts", "monolithic,intra",
            "--rate", f"{rate:.6f}", "--token-scale", "1", "--replays", "2", "--no-interleave",
            "--profile-out", prof, "--budget", "500s", "--json"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"]["replayed_requests"] == 24 and out["workload"]["speed"] == pytest.approx(1.0)
    assert out["host_effects"]["applied"]["monolithic"][0] == "front_cpu"
    assert out["plan"]["requests_per_replay"] == 24 and out["wall_s"] <= 500 + 30
    # Accuracy: the product's bar where the machine was quiet through every phase, as validate
    # measured it (each phase's CPU used by other processes, `foreign_cores`). Where it was not,
    # the replays measured the other processes as much as the server: on this 2-core VM with
    # 1.6-1.9 foreign cores in every phase (2026-12-06, load average 8-12) two runs of this test
    # read monolithic 30% and 72% and intra 33% and 2.6% (median p50 error), the calibration
    # and the replays running at different speeds. No accuracy bound holds there; what does is
    # that validate says so, and that a layout that kept up with the load (every request within
    # its SLOs) served the offered tokens: intra's throughput was within 0.2% in both runs.
    foreign = [v for phases in out["foreign_cores"].values() for v in phases.values() if v is not None]
    if max(foreign, default=0.0) < QUIET_CORES:
        for layout, s in out["summary"].items():
            assert s["median_abs_rel_error_p50"] <= BAR, (layout, s)
    else:
        assert "other processes used CPU during" in " ".join(out.get("notes", []))
        kept_up = [lay for lay, s in out["summary"].items() if s["slo_attainment_measured"] == 1.0]
        for r in out["rows"]:
            if r["metric"] == "throughput_tok_s" and r["layout"] in kept_up:
                assert abs(r["rel_error"]) <= 0.02, r
    # the result is kept in the store, with the profile it was predicted from
    from gpuprobe.store import Store
    with Store.open(store, read_only=True) as st:
        rows = st.validations()
    assert len(rows) == 1 and rows.iloc[0]["best_predicted"] == out["best_predicted"]
    assert bool(rows.iloc[0]["bar_met"]) == out["bar_met"]
    saved = json.load(open(prof))
    assert saved["meta"]["model"] == "tiny" and saved["meta"]["target"] == "cpu"
    assert saved["meta"]["created"] and set(saved["meta"]["split_in_s"]) == {"intra"}
    # one prediction path: simulate on the saved profile, same schedule, seeds and SLO, gives
    # validate's predictions without host effects (what --no-host-effects reports)
    slo = out["slo"]
    assert cli.main(["simulate", "--store", store, "--workload", str(csv), "--profile", prof,
                     "--layouts", "monolithic,intra", "--seeds", str(out["plan"]["sim_seeds"]),
                     "--slo-ttft", str(slo["ttft_s"]), "--slo-tbt", str(slo["tbt_s"]),
                     "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    plain = out["without_host_effects"]
    for layout in ("monolithic", "intra"):
        for metric, value in plain[layout]["predicted"].items():
            # the same simulation; the profile and trace pass through JSON and CSV, so the last digits differ
            assert sim["layouts"][layout][metric] == pytest.approx(value, rel=1e-6, nan_ok=True), \
                (layout, metric)
    assert sim["host_effects"] == []
