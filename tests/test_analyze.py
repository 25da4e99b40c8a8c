"""analyze: the Azure prompt:output ratios, bucket columns, Little's law, prefix reuse, change points."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuprobe.cli.main import main
from gpuprobe.workloads.analyze import analyze
from gpuprobe.workloads.changepoints import change_points

DATA = Path(__file__).resolve().parent.parent / "gpuprobe" / "data"
FIX = Path(__file__).resolve().parent / "fixtures" / "workloads"


@pytest.mark.parametrize("trace,ratio", [("code", 73.0), ("conv", 5.5)])
def test_cli_azure_ratio(tmp_path, capsys, trace, ratio):
    db = str(tmp_path / "s.db")
    assert main(["import", str(DATA / f"azure_llm_2023_{trace}.csv"), "--name", trace, "--store", db, "--json"]) == 0
    capsys.readouterr()
    assert main(["analyze", "--workload", trace, "--bucket", "10s", "--store", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prompt_output_ratio"] == pytest.approx(ratio, rel=0.02)
    # the bucket the trace ends inside is left out of the table (it would read low), not the totals
    tail = out["tail_requests_not_bucketed"]
    assert 340 <= len(out["buckets"]) <= 352 and sum(b["num_requests"] for b in out["buckets"]) + tail == out["requests"]
    assert 0 < out["tail_s_not_bucketed"] < 10 and tail > 0


def test_bucket_columns_and_littles_law():
    df = pd.DataFrame({"arrival_s": [0.0, 1, 2, 25, 30], "prompt_tokens": [100, 300, 200, 50, 9],
                       "output_tokens": [10, 30, 20, 150, 9]})
    mix = analyze(df, bucket_s=10, decode_tbt_s=0.05)
    b = mix.buckets
    # the request at 30 s opens a bucket the trace ends inside: not a bucket of its own (0 s of it)
    assert b["start_s"].tolist() == [0, 10, 20] and b["num_requests"].tolist() == [3, 0, 1]
    assert mix.summary["tail_requests_not_bucketed"] == 1 and mix.summary["requests"] == 5
    assert b["prefill_tokens_per_s"].iloc[0] == 60 and b["decode_tokens_per_s"].iloc[0] == 6
    assert b["prefill_token_share"].iloc[0] == pytest.approx(600 / 660) and np.isnan(b["prefill_token_share"].iloc[1])
    assert b["concurrent_decodes_est"].iloc[2] == pytest.approx(15 * 0.05)
    assert b["prompt_tokens_p50"].iloc[0] == 200 and mix.summary["decode_tbt_s_assumed"] == 0.05


def test_prefix_reuse_from_mooncake_fixture(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    main(["import", str(FIX / "mooncake_small.jsonl"), "--name", "mc", "--store", db])
    capsys.readouterr()
    main(["analyze", "--workload", "mc", "--bucket", "1s", "--store", db, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["prefix_block_reuse"] == pytest.approx(3 / 23)  # blocks 46, 47 then 46 seen before


def test_change_points_find_shift_not_noise():
    rng = np.random.default_rng(0)
    flat = 0.8 + rng.normal(0, 0.03, 120)
    assert change_points(flat) == []
    shifted = np.concatenate([0.3 + rng.normal(0, 0.03, 60), 0.9 + rng.normal(0, 0.03, 60)])
    assert change_points(shifted) == [60]
