"""synth: deterministic for a seed, right rate, bursty gamma, mix shift, daily cycle, saved workload."""
import json

import numpy as np
import pandas as pd
import pytest

from gpuprobe.cli.main import main
from gpuprobe.store import Store
from gpuprobe.workloads.synth import synthesize

LENGTHS = pd.DataFrame({"prompt_tokens": [100, 2000, 50, 4000, 300], "output_tokens": [400, 10, 300, 5, 100]})


def test_deterministic_and_rate():
    a = synthesize(5, 2000, LENGTHS, seed=3)
    assert a.equals(synthesize(5, 2000, LENGTHS, seed=3)) and not a.equals(synthesize(5, 2000, LENGTHS, seed=4))
    assert len(a) / 2000 == pytest.approx(5, rel=0.05) and a["arrival_s"].is_monotonic_increasing


def test_gamma_is_burstier_than_poisson():
    cv = lambda df: np.diff(df["arrival_s"]).std() / np.diff(df["arrival_s"]).mean()  # noqa: E731
    assert cv(synthesize(5, 2000, LENGTHS, seed=1)) == pytest.approx(1, abs=0.1)
    assert cv(synthesize(5, 2000, LENGTHS, "gamma", cv=3, seed=1)) > 2.3


def test_mix_shift_decode_to_prefill():
    df = synthesize(5, 1000, LENGTHS, mix_shift=("decode-heavy", "prefill-heavy"), seed=1)
    share = lambda d: d["prompt_tokens"].sum() / (d["prompt_tokens"].sum() + d["output_tokens"].sum())  # noqa: E731
    assert share(df[df["arrival_s"] < 100]) < 0.6 and share(df[df["arrival_s"] > 900]) > 0.9


def test_daily_cycle_trough_then_peak():
    df = synthesize(5, 1000, LENGTHS, daily_cycle=True, cycle_period_s=1000, seed=1)
    first, middle = (df["arrival_s"] < 100).sum(), ((df["arrival_s"] > 450) & (df["arrival_s"] < 550)).sum()
    assert middle > 2 * first


def test_cli_saves_workload(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    rc = main(["synth", "--name", "s", "--rate", "2", "--duration", "600", "--arrival", "gamma", "--cv", "2",
               "--lengths-from", "azure-conv", "--mix-shift", "decode-heavy:prefill-heavy", "--daily-cycle",
               "--seed", "1", "--store", db, "--json"])
    out = json.loads(capsys.readouterr().out)
    with Store.open(db) as store:
        assert rc == 0 and out["requests"] == len(store.workload("s")) > 100
        assert store.workload_meta("s")["params"]["seed"] == 1
    assert main(["synth", "--name", "s", "--store", db]) == 2  # exists


def test_cli_scales_the_source_lengths(tmp_path, capsys):
    """--prompt-scale / --output-scale: the same draw (same seed) with its lengths multiplied."""
    db = str(tmp_path / "s.db")
    base = ["synth", "--rate", "2", "--duration", "120", "--seed", "3", "--store", db, "--json"]
    assert main([*base, "--name", "plain"]) == 0
    assert main([*base, "--name", "long", "--prompt-scale", "10", "--output-scale", "5"]) == 0
    capsys.readouterr()
    with Store.open(db) as store:
        plain, long = store.workload("plain"), store.workload("long")
        assert store.workload_meta("long")["params"]["prompt_scale"] == 10.0
    assert np.allclose(long["arrival_s"], plain["arrival_s"])
    assert (long["prompt_tokens"] == plain["prompt_tokens"] * 10).all()
    assert (long["output_tokens"] == plain["output_tokens"] * 5).all()
    with pytest.raises(SystemExit) as bad:
        main(["synth", "--name", "x", "--prompt-scale", "0", "--store", db])
    assert bad.value.code == 2 and "--prompt-scale" in capsys.readouterr().err
