"""synth's step and oscillating mixes, which the autopilot's live tests replay: `--shift-at`
moves the mix at once, `--mix-every` alternates it; both refuse nonsense in one line."""
from __future__ import annotations

import pandas as pd
import pytest

from gpuprobe.cli.main import main
from gpuprobe.errors import UserError
from gpuprobe.workloads.synth import synthesize

LENGTHS = pd.DataFrame({"prompt_tokens": [8, 600], "output_tokens": [24, 16]})


def _long(df):
    return df.prompt_tokens == 600


def test_shift_at_moves_the_mix_at_once():
    df = synthesize(20.0, 20.0, LENGTHS, mix_shift=("decode-heavy", "prefill-heavy"), shift_at_s=8.0, seed=1)
    before, after = df[df.arrival_s < 8.0], df[df.arrival_s >= 8.0]
    assert _long(before).mean() < 0.02 and _long(after).mean() > 0.98
    # without it the mix moves linearly: both kinds on both sides of 8 s
    lin = synthesize(20.0, 20.0, LENGTHS, mix_shift=("decode-heavy", "prefill-heavy"), seed=1)
    assert 0.1 < _long(lin[lin.arrival_s < 8.0]).mean() < 0.6


def test_mix_every_alternates():
    df = synthesize(20.0, 20.0, LENGTHS, mix_shift=("decode-heavy", "prefill-heavy"), mix_every_s=5.0, seed=2)
    share = df.assign(k=(df.arrival_s // 5).astype(int)).groupby("k").apply(
        lambda g: _long(g).mean(), include_groups=False)
    assert list(share.round()) == [0.0, 1.0, 0.0, 1.0]


def test_bad_shift_flags():
    with pytest.raises(UserError, match="give one of them"):
        synthesize(1.0, 10.0, LENGTHS, shift_at_s=1.0, mix_every_s=2.0)
    with pytest.raises(UserError, match="--mix-every"):
        synthesize(1.0, 10.0, LENGTHS, mix_every_s=0.0)


def test_cli_shift_at(tmp_path, capsys):
    src = tmp_path / "lengths.csv"  # the two lengths as an Azure-format trace
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,8,24\n"
                   "2023-11-16 18:15:47.6805900,600,16\n")
    db = str(tmp_path / "s.db")
    assert main(["--store", db, "synth", "--name", "shift", "--rate", "5", "--duration", "20s",
                 "--lengths-from", str(src), "--mix-shift", "decode-heavy:prefill-heavy",
                 "--shift-at", "10s", "--json"]) == 0
    from gpuprobe.store import Store
    with Store.open(db, read_only=True) as store:
        df = store.workload("shift")
    assert _long(df[df.arrival_s < 10]).mean() < 0.05 and _long(df[df.arrival_s >= 10]).mean() > 0.95
    assert main(["--store", db, "synth", "--name", "bad", "--lengths-from", str(src),
                 "--mix-every", "soon"]) == 2
    assert "--mix-every" in capsys.readouterr().err


def test_forecast_next_forecasts_from_history_or_says_why_not():
    """With gpuprobe.forecast installed, the next interval comes from its forecast of the
    history (after the shift: the long prompts); without it, the window itself, and the
    audit log's source says the forecaster is missing."""
    from gpuprobe.autopilot.inputs import forecast_next
    hist = synthesize(3.0, 60.0, LENGTHS, mix_shift=("decode-heavy", "prefill-heavy"), shift_at_s=40.0, seed=1)
    win = hist[hist.arrival_s >= 57.0].assign(arrival_s=lambda d: d.arrival_s - d.arrival_s.min())
    wl, summary = forecast_next(win, 3.0, 1.5, hist, 1.5)
    assert summary["window_requests"] == len(win)
    assert summary["source"] == "gpuprobe.forecast" and wl.prompt_tokens.mean() > 300
    wl, summary = forecast_next(win, 3.0, 1.5, None)
    assert summary["source"].startswith("persistence") and wl is win
