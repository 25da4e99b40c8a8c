"""One short end-to-end validate run: JSON shape and finite errors."""
import json
import math

import pytest


def _short_run(tmp_path, monkeypatch, layouts: tuple[str, ...], interleave: bool):
    """One validate run of 16 requests of azure-conv, small calibration sweeps, 2 replays:
    (its JSON, as the CLI prints it; the dump of its inputs; the options)."""
    import pickle

    import pandas as pd

    from gpuprobe.perf.metrics import Slo
    from gpuprobe.validate.options import ValidateOptions
    from gpuprobe.validate.run import run_validate
    from gpuprobe.workloads.loading import bundled_trace
    raw = pd.read_csv(bundled_trace("azure-conv"), nrows=40)
    ts = pd.to_datetime(raw["TIMESTAMP"])
    wl = pd.DataFrame({"arrival_s": (ts - ts.iloc[0]).dt.total_seconds(),
                       "prompt_tokens": raw["ContextTokens"], "output_tokens": raw["GeneratedTokens"]})
    opts = ValidateOptions(layouts=layouts, limit=16, token_scale=0.05,
                           slo=Slo(1.0, 0.1), budget_s=200.0, quiet_wait_s=0.0,  # no waits
                           replays=2, interleave=interleave,
                           calibration=(("prefill_sizes", (16, 32, 64, 128, 256)), ("reps", 1),
                                        ("decode_batches", (1, 2, 4, 8, 16)), ("decode_prompts", (32,)),
                                        ("decode_tokens", 8)))
    monkeypatch.setenv("GPUPROBE_VALIDATE_DUMP", str(tmp_path / "dump.pkl"))
    out = run_validate(wl, opts, progress=False)
    doc = json.loads(json.dumps({k: v for k, v in out.items() if k != "profile"}, default=float))
    with open(tmp_path / "dump.pkl", "rb") as fh:
        return doc, pickle.load(fh), opts


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_one_pass_calibrates_once_before_the_replays_and_rechecks_after(tmp_path, monkeypatch):
    """--no-interleave, on monolithic alone (the protocol, not the comparison, is the subject
    here; the interleaved run below checks the whole shape on two layouts)."""
    doc, dump, _ = _short_run(tmp_path, monkeypatch, ("monolithic",), interleave=False)
    assert [r["layout"] for r in doc["rows"]] == ["monolithic"] * len(doc["rows"]) and doc["rows"]
    probe = dump["probes"]["monolithic"]
    passes, windows = probe["cal_runs"], probe["replay_windows"]
    assert len(windows) == 2
    assert len(passes) == 1 and passes[0]["window"][1] <= windows[0][0] <= windows[-1][1]
    assert windows[-1][1] <= probe["recheck_window"][0]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_validate_run_has_the_documented_shape(tmp_path, monkeypatch):
    from gpuprobe.perf.metrics import pick_best
    from gpuprobe.validate.verdict import COMPARED
    doc, dump, opts = _short_run(tmp_path, monkeypatch, ("monolithic", "intra"), interleave=True)
    assert {"rows", "best_measured", "best_predicted", "slo"} <= set(doc)
    assert len(doc["rows"]) == 2 * len(COMPARED)
    for r in doc["rows"]:
        assert set(r) == {"layout", "metric", "predicted", "measured", "rel_error"}
        if r["metric"] in ("ttft_p50_s", "throughput_tok_s"):
            assert r["rel_error"] is not None and math.isfinite(r["rel_error"])
    assert set(doc["foreign_cores"]) == {"monolithic", "intra"}
    lo, hi = doc["measured_range"]["intra"]["ttft_p50_s"]  # 2 replays: the median between
    ttft = next(r["measured"] for r in doc["rows"] if r["layout"] == "intra" and r["metric"] == "ttft_p50_s")
    assert 0 < lo <= ttft <= hi
    assert min(doc["front_stretch"]["intra"].values()) >= 1.0
    # each side's best is the one ranking rule applied to that side's own figures in the result
    # (which layout wins is the measurement's to say: intra's p99 TBT against monolithic's)
    for side in ("measured", "predicted"):
        figures = {lay: {"slo_attainment": doc["summary"][lay][f"slo_attainment_{side}"],
                         "num_requests": doc["workload"]["replayed_requests"],
                         "tbt_p99_s": next(r[side] for r in doc["rows"]
                                           if r["layout"] == lay and r["metric"] == "tbt_p99_s")}
                   for lay in ("monolithic", "intra")}
        assert doc[f"best_{side}"] == pick_best(figures, doc["tbt_tolerance"]), (side, figures)
    assert doc["best_measured"] == doc["tied_measured"][0]
    assert doc["tbt_tolerance"] >= 0.15
    pool = doc["tbt_pool"]["intra"]  # what the pooled TBT figures are made of
    assert pool["tbt_gaps"] > 0 and 0 < pool["tbt_first_share"] <= 1
    # the same gaps as the front stamped them: every replay's tokens found in the server's rows
    at_server = doc["server_tbt"]["intra"]
    assert at_server["tbt_gaps"] == pool["tbt_gaps"]
    assert 0 < at_server["tbt_p50_s"] <= at_server["tbt_p99_s"]
    # the speed probe read both layouts' cores around each kept replay
    drift = doc["speed_drift"]
    assert [set(f) for f in drift["intra"]] == [{"intra.prefill", "intra.decode"}] * 2
    assert all(0.2 < v < 5 for f in drift["monolithic"] + drift["intra"] for v in f.values())
    assert set(doc["without_host_effects"]) >= {"monolithic", "intra", "best_predicted"}
    assert doc["host_effects"]["applied"]["intra"] == ["front_cpu", "speed_drift"]
    assert set(doc["recheck"]) == {"monolithic", "intra"}
    assert all(v is None or 0.5 <= v <= 2.0 for r in doc["recheck"].values() for v in r.values())
    # the dump holds what the predictions were made from, and every step the servers took
    w = doc["workload"]
    assert len(dump["schedule"]) == w["replayed_requests"] == doc["plan"]["requests_per_replay"]
    assert set(dump["probes"]) == {"monolithic", "intra"}
    # the default load: the busiest stretch at half the capacity, never raised to fit
    assert w["basis"] == "peak" and w["load"] == 0.5 and w["peak_load"] <= 0.5 * 1.02 + 1e-9
    assert doc["wall_s"] <= opts.budget_s + 30  # the budget caps the run (one phase's overrun)
    assert dump["schedule"]["arrival_s"].iloc[-1] == pytest.approx(w["span_s"])
    steps = dump["probes"]["intra"]["all_steps"]
    assert set(steps["role"]) == {"prefill", "decode"}
    r = dump["probes"]["intra"]["replays"][0]
    during = steps[(steps["start_s"] >= r["arrival_s"].min()) & (steps["start_s"] <= r["finish_s"].max())]
    assert set(during["role"]) == {"prefill", "decode"}  # the replay's own steps are there
    reqs = dump["probes"]["intra"]["all_requests"]  # ... and the server's rows of its requests,
    mine = reqs[reqs["arrival_s"].between(r["arrival_s"].min() - 0.5, r["finish_s"].max())]
    assert len(mine) >= len(r) and mine["kv_handoff_s"].notna().sum() >= len(r) // 2  # handoffs
    # re-predicted offline from the dump, the same predictions and measurements to the digit
    from gpuprobe.validate.repredict import repredict
    again = repredict(dump)
    assert [(r["predicted"], r["measured"]) for r in again["rows"]] == \
        [(r["predicted"], r["measured"]) for r in doc["rows"]]
    assert (again["best_measured"], again["best_predicted"]) == (doc["best_measured"], doc["best_predicted"])
    _check_sim_seeds(dump)
    probe = dump["probes"]["intra"]
    passes, windows = probe["cal_runs"], probe["replay_windows"]
    # a pass after each replay as the plan keeps them (the one between the replays may go
    # to fit the budget), the pass after the last replay always; every pass is in the fit
    assert len(windows) == 2 and 2 <= len(passes) <= doc["plan"]["calibration_passes"] <= 3
    assert passes[0]["window"][1] <= windows[0][0] and windows[1][1] <= passes[-1]["window"][0]
    assert len(probe["cal_steps"]) == sum(len(p["steps"]) for p in passes)
    assert probe["calibrate_windows"] == [p["window"] for p in passes]


def _check_sim_seeds(dump: dict) -> None:
    """Each replay's prediction is the median over sim_seeds noise seeds (replay i draws
    seeds i, i + R, i + 2R, ...), and the layout's the median over its replays."""
    from dataclasses import replace

    import numpy as np

    from gpuprobe.perf.contention import stretched
    from gpuprobe.validate.layout_probe import scheduler_configs
    from gpuprobe.sim.predict import _contended, _scaled_front
    from gpuprobe.validate.repredict import dump_drift, probes_from_dump
    from gpuprobe.validate.predictions import predict_layouts

    opts = replace(dump["options"], sim_seeds=3)
    probes = probes_from_dump(dump, opts)
    drift = dump_drift(dump, probes, opts)
    profile, predicted, _, _ = predict_layouts(dump["schedule"], probes, opts, drift)
    factors = (drift or {}).get("monolithic") or [{}]
    R = len(factors)
    per_replay = [np.median([_contended(dump["schedule"], stretched(profile, f), "monolithic",
                                        _scaled_front(probes["monolithic"].front_cpu, f),
                                        opts.slo, scheduler_configs(probes),
                                        i + R * j)[1].summary["ttft_p50_s"]
                             for j in range(3)]) for i, f in enumerate(factors)]
    assert predicted["monolithic"]["ttft_p50_s"] == pytest.approx(float(np.median(per_replay)))


def _foreign_spinner(seconds: float, nice: int = 0) -> None:
    """A busy loop that is NOT in this process tree: the shell exits at once and the loop is
    adopted by init, as a neighbour's benchmark would be."""
    import subprocess
    subprocess.run(["sh", "-c", f"nice -n {nice} timeout {seconds} sh -c 'while :; do :; done' "
                    ">/dev/null 2>&1 &"], check=True)


@pytest.mark.timeout(30)
def test_cpu_watch_counts_other_processes_not_ours():
    import os
    import time

    from gpuprobe.validate.cpu_watch import CpuWatch
    if not os.path.exists("/proc/stat"):
        pytest.skip("needs Linux /proc")
    _foreign_spinner(2)
    w = CpuWatch()
    time.sleep(1.0)
    assert w.foreign_cores() > 0.5  # the spinner keeps one core busy


@pytest.mark.timeout(30)
def test_cpu_watch_counts_niced_work():
    import os
    import time

    from gpuprobe.validate.cpu_watch import CpuWatch, wait_quiet
    if not os.path.exists("/proc/stat"):
        pytest.skip("needs Linux /proc")
    wait_quiet(5.0)  # the test before leaves its spinner a second more
    _foreign_spinner(2, nice=19)
    w = CpuWatch()
    time.sleep(1.0)
    assert w.foreign_cores() > 0.5  # a niced job's core is foreign load too


@pytest.mark.timeout(30)
def test_phase_guard_repeats_a_disturbed_phase_once():
    import os
    import time

    from gpuprobe.validate.cpu_watch import PhaseGuard
    if not os.path.exists("/proc/stat"):
        pytest.skip("needs Linux /proc")
    calls, said = [], []

    def phase():
        calls.append(time.monotonic())
        if len(calls) == 1:
            _foreign_spinner(1.2)
        time.sleep(1.0)
    guard = PhaseGuard(time.monotonic() + 60, phases_left=1, phase_s=1, max_wait_s=0,
                       say=said.append)
    guard("test phase", phase)
    assert len(calls) == 2
    assert any("repeating" in m for m in said)


def test_cli_device_option_reaches_the_server_launcher(tmp_path):
    import argparse

    from gpuprobe.cli.commands import validate as cmd
    from gpuprobe.validate.layout_probe import LayoutProbe

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    assert cmd._options(p.parse_args(["--workload", "x"])).device == "cpu"
    opts = cmd._options(p.parse_args(["--workload", "x", "--device", "cuda"]))
    assert opts.device == "cuda"
    with pytest.raises(SystemExit):
        p.parse_args(["--workload", "x", "--device", "tpu"])
    seen = {}

    def fake_start_server(model, layout, **kw):
        seen.update(kw, model=model, layout=layout)
        raise RuntimeError("stop here")

    import gpuprobe.server.launch as launch
    real, launch.start_server = launch.start_server, fake_start_server
    try:
        with pytest.raises(RuntimeError):
            LayoutProbe(opts, "intra", str(tmp_path), 100).__enter__()
    finally:
        launch.start_server = real
    assert seen["device"] == "cuda" and seen["layout"] == "intra" and seen["prefill_share"] == 0.5


def _validate_parser():
    import argparse

    from gpuprobe.cli.commands import validate as cmd

    p = argparse.ArgumentParser()
    cmd.add_arguments(p)
    return p


def _cli_options(*args):
    """ValidateOptions as `gpuprobe validate --workload x ARGS...` would build them."""
    from gpuprobe.cli.commands import validate as cmd

    return cmd._options(_validate_parser().parse_args(["--workload", "x", *args]))


def test_cli_kv_cache_defaults_to_what_an_8b_model_needs_on_cuda():
    from gpuprobe.cli.commands import validate as cmd

    assert _cli_options().server_opts == ()
    cuda = _cli_options("--device", "cuda")
    assert dict(cuda.server_opts)["kv_cache_mb"] == cmd.DEVICE_DEFAULTS["cuda"]["kv_cache_mb"]
    mine = _cli_options("--kv-cache-mb", "512")
    assert dict(mine.server_opts)["kv_cache_mb"] == 512
    with pytest.raises(SystemExit):  # argparse: "argument --kv-cache-mb: must be at least 1"
        _validate_parser().parse_args(["--workload", "x", "--kv-cache-mb", "0"])


def test_cli_defaults_follow_the_device():
    cpu = _cli_options()
    assert (cpu.limit, cpu.token_scale) == (300, 0.1)
    cuda = _cli_options("--device", "cuda")
    assert (cuda.limit, cuda.token_scale) == (30, 0.5)
    mine = _cli_options("--device", "cuda", "--limit", "80", "--token-scale", "1.0")
    assert (mine.limit, mine.token_scale) == (80, 1.0)


def test_cli_interleaves_calibration_on_cpu_not_on_cuda():
    assert _cli_options().interleave is True
    assert _cli_options("--device", "cuda").interleave is False
    assert _cli_options("--no-interleave").interleave is False
    assert _cli_options("--device", "cuda", "--interleave").interleave is True


def test_no_host_effects_predicts_as_simulate_does():
    """--no-host-effects: validate measures the host effects but predicts without them."""
    import types

    from gpuprobe.perf.contention import FrontCpu
    from gpuprobe.validate.predictions import host_effects_of

    probes = {"monolithic": types.SimpleNamespace(front_cpu=FrontCpu(0.005, 0.001))}
    on = host_effects_of(probes, _cli_options("--layouts", "monolithic"), {"monolithic": [{"m": 1.1}]})
    assert on.applied("monolithic") == ["front_cpu", "speed_drift"]
    assert host_effects_of(probes, _cli_options("--no-host-effects"), {}) is None


@pytest.mark.timeout(30)
def test_the_budget_stops_a_phase_in_progress_with_one_line():
    """BudgetWatch: at the deadline the running phase's process is stopped and the run ends
    with a line naming the budget, not minutes later."""
    import subprocess
    import time
    import types

    from gpuprobe.errors import GpuprobeError
    from gpuprobe.server.launch import ServerHandle
    from gpuprobe.validate.budget_watch import BudgetWatch

    proc = subprocess.Popen(["sleep", "60"])  # stands for a server busy with a long phase
    probe = types.SimpleNamespace(layout="monolithic", handle=ServerHandle("http://x", proc))
    said = []
    t0 = time.monotonic()
    with pytest.raises(GpuprobeError, match="--budget of 1 s ran out"):
        with BudgetWatch(t0 + 1.0, 1.0, said.append) as watch:
            with watch.running(_Entered(probe)):
                while proc.poll() is None and time.monotonic() - t0 < 20:  # the phase, polling
                    time.sleep(0.05)
                raise GpuprobeError("monolithic: requests failed")
    assert proc.poll() is not None and time.monotonic() - t0 < 15
    assert any("budget is spent" in m for m in said)


class _Entered:
    """A probe-like context (the LayoutProbe protocol: enter gives the probe)."""

    def __init__(self, probe):
        self.probe = probe
        self.layout, self.handle = probe.layout, probe.handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def test_the_guard_reserves_the_plans_phases_not_the_short_ones_so_far():
    """After the plan, a disturbed replay is not repeated on time the planned calibration
    passes still need (the mean of the phases so far said there was room)."""
    import time

    from gpuprobe.validate.cpu_watch import PhaseGuard

    guard = PhaseGuard(time.monotonic() + 100, phases_left=5, phase_s=1)
    guard.took = [1.0, 1.0]
    assert guard.spare_s() > 50
    guard.replan(time.monotonic() + 100, 5, phase_s=30.0)
    assert guard.spare_s() < 0
