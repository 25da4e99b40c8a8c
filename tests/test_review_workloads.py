"""Review fixes in import, workloads, synth, analyze and store: each bad input is one line and
exit 2, a store is never made where none was asked for, and recorded stores import each
request once."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from cli_run import run_cli as gp
from gpuprobe.store import Store
from gpuprobe.store.samples import Sample
from gpuprobe.workloads.analyze import analyze
from gpuprobe.workloads.pipeline import ImportOptions, import_trace

FIXTURES = Path(__file__).parent / "fixtures" / "workloads"
README = Path(__file__).parent.parent / "README.md"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def user_error(capsys, *argv) -> str:
    """Run argv; assert one line on stderr, exit 2, no internal error; return the line."""
    rc, _, err = gp(capsys, *argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "internal error" not in err, err
    return lines[0]


def stored(db) -> list:
    with Store.open(db, create=False) as store:
        return list(store.workloads()["name"])


# 1. a recorded store imports one recording of each request; a wrong --run-id lists the runs

@pytest.fixture()
def recorded(tmp_path):
    db = tmp_path / "rec.db"
    with Store.open(db) as store:
        for run_id, source in (("replay-1", "replay"), ("serve-1", "server")):
            store.insert_requests({"run_id": run_id, "source": source, "request_id": f"{run_id}-{i}",
                                   "arrival_s": 100.0 + i, "prompt_tokens": 10 + i, "output_tokens": 5}
                                  for i in range(3))
    return db


def test_recorded_store_imports_the_client_rows_once(capsys, tmp_path, recorded):
    rc, out, err = gp(capsys, "import", recorded, "--format", "recorded", "--name", "served", "--json",
                      "--store", tmp_path / "s.db")
    assert rc == 0 and json.loads(out)["requests"] == 3
    assert "dropped 3 rows: source 'server': only 'replay' rows are imported without --run-id" in err
    rc, out, _ = gp(capsys, "import", recorded, "--run-id", "serve-1", "--name", "srv", "--json",
                    "--store", tmp_path / "s.db")
    assert rc == 0 and json.loads(out)["requests"] == 3


def test_unknown_run_id_lists_the_runs(capsys, tmp_path, recorded):
    line = user_error(capsys, "import", recorded, "--run-id", "nope", "--name", "x", "--store", tmp_path / "s.db")
    assert f"no run 'nope' in {recorded}; runs: 'replay-1', 'serve-1'" in line
    assert stored(tmp_path / "s.db") == []


# 2. --store: an empty file is not a store; readers never create one; bundled traces need none

def test_empty_file_is_not_a_store_and_stays_empty(capsys, tmp_path):
    empty = tmp_path / "e2.txt"
    empty.write_bytes(b"")
    for argv in (["store", "info"], ["import", FIXTURES / "burstgpt_small.csv", "--name", "b"]):
        assert "e2.txt: not a gpuprobe store (an empty file)" in user_error(capsys, *argv, "--store", empty)
    assert empty.stat().st_size == 0


@pytest.mark.parametrize("argv", [["store", "info"], ["workloads", "list"], ["workloads", "show", "w"],
                                  ["workloads", "export", "w"], ["workloads", "delete", "w"],
                                  ["analyze", "--workload", "w"]])
def test_readers_do_not_create_a_store(capsys, tmp_path, argv):
    db = tmp_path / "typo.db"
    assert "no store at" in user_error(capsys, *argv, "--store", db)
    assert not db.exists()


def test_bundled_traces_need_no_store_and_writers_create_one(capsys, tmp_path):
    db = tmp_path / "none.db"
    rc, out, _ = gp(capsys, "workloads", "show", "azure-conv", "--json", "--store", db)
    assert rc == 0 and json.loads(out)["requests"] == 19_366
    rc, out, _ = gp(capsys, "analyze", "--workload", "azure-code", "--bucket", "600s", "--json", "--store", db)
    assert rc == 0 and json.loads(out)["requests"] == 8_819
    assert not db.exists()
    rc, _, _ = gp(capsys, "import", FIXTURES / "burstgpt_small.csv", "--name", "b", "--store", db)
    assert rc == 0 and stored(db) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["none.db"]  # no temporary file left behind


# 3. values that used to end in "internal error"

@pytest.mark.parametrize("argv, needle", [
    (["--seed", "-1"], "--seed: must not be negative"),
    (["--rate", "nan"], "--rate: 'nan' is not a finite number"),
    (["--rate", "inf", "--duration", "1s"], "--rate: 'inf' is not a finite number"),
    (["--rate", "1e9", "--duration", "10s"], "more than 10,000,000"),
    (["--duration", "1000d", "--rate", "100"], "more than 10,000,000"),
    (["--duration", "inf"], "--duration: 'inf' is not a finite duration"),
    (["--arrival", "gamma", "--cv", "1e10"], "--cv: 1e+10 is not between 0.01 and 100"),
])
def test_synth_bad_numbers(capsys, tmp_path, argv, needle):
    assert needle in user_error(capsys, "synth", "--name", "x1", *argv, "--store", tmp_path / "s.db")


def test_analyze_empty_workload(capsys, tmp_path):
    db = tmp_path / "s.db"
    with Store.open(db) as store:
        store.save_workload("x2", [])
    assert "workload 'x2' has no requests" in user_error(capsys, "analyze", "--workload", "x2", "--store", db)


@pytest.mark.parametrize("out, needle", [("/nonexistent/d/x.csv", "folder '/nonexistent/d' does not exist"),
                                         ("{tmp}", "is a folder")])
def test_export_to_a_bad_path(capsys, tmp_path, out, needle):
    line = user_error(capsys, "workloads", "export", "azure-code", "--out", out.format(tmp=tmp_path),
                      "--store", tmp_path / "s.db")
    assert needle in line


def test_export_bundled_trace(capsys, tmp_path):
    out = tmp_path / "x.csv"
    rc, _, _ = gp(capsys, "workloads", "export", "azure-code", "--out", out, "--store", tmp_path / "s.db")
    df = pd.read_csv(out)
    assert rc == 0 and len(df) == 8_819 and list(df.columns[:3]) == ["arrival_s", "prompt_tokens", "output_tokens"]


def test_retention_zero_resolution_refused_and_samples_kept(capsys, tmp_path):
    db = tmp_path / "s.db"
    with Store.open(db) as store:
        store.insert_samples([Sample(1000.0 + i, "h", "nvml", "gpu0", "power_w", float(i)) for i in range(5)])
    line = user_error(capsys, "store", "retention", "--max-age", "0s", "--mode", "downsample",
                      "--resolution", "0s", "--store", db)
    assert "--resolution: '0s' must be at least 1ms" in line
    with Store.open(db) as store:
        assert store._conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 5


# 4. too many buckets

def test_analyze_bucket_cap(capsys, tmp_path):
    line = user_error(capsys, "analyze", "--workload", "azure-code", "--bucket", "1ms", "--json",
                      "--store", tmp_path / "s.db")
    assert "a 3,436 s workload into more than 100,000 buckets; use a larger --bucket (at least 0.035s)" in line
    df = pd.DataFrame({"arrival_s": [0.0, 3435.0], "prompt_tokens": [1, 1], "output_tokens": [1, 1]})
    assert len(analyze(df, 0.035).buckets) <= 100_000


# 5. error texts

def test_skip_bad_hint_only_where_the_flag_exists(capsys, tmp_path):
    bad = tmp_path / "g.csv"
    bad.write_text(AZURE + "2023-11-16 18:17:03.97,4808,10\n2023-11-16 18:17:04.97,x,10\n")
    db = tmp_path / "s.db"
    for argv in (["analyze", "--workload", bad], ["synth", "--name", "s", "--lengths-from", bad]):
        line = user_error(capsys, *argv, "--store", db)
        assert line.endswith("g.csv:3: field ContextTokens: 'x' is not a number"), line
    line = user_error(capsys, "import", bad, "--name", "g", "--store", db)
    assert line.endswith("'x' is not a number (use --skip-bad to import the rest)")


def test_missing_json_field_is_named_missing(capsys, tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "output_length": 5}\n')
    line = user_error(capsys, "import", path, "--format", "mooncake", "--name", "m", "--store", tmp_path / "s.db")
    assert "m.jsonl:1: field input_length: is missing" in line


def test_mapped_time_column_named_as_in_the_file(tmp_path):
    path = tmp_path / "ooo.csv"
    path.write_text("ts,in,out\n5,1,1\n6,1,1\n7,1,1\n1,1,1\nx,1,1\n")
    opts = ImportOptions(mapping="timestamp=ts,prompt_tokens=in,output_tokens=out", window_rows=1, chunk_rows=1)
    with Store.open(tmp_path / "s.db") as store:
        with pytest.raises(Exception, match=r"ooo\.csv:5: field ts: 1\.000000 is earlier"):
            import_trace(store, path, "o", opts=opts)
        result = import_trace(store, path, "o", skip_bad=True, opts=opts)
    assert set(result.skipped) == {"field ts: too far out of order", "field ts: not a number"}


def test_negative_duration_says_negative(capsys, tmp_path):
    line = user_error(capsys, "analyze", "--workload", "azure-code", "--bucket=-10s", "--store", tmp_path / "s.db")
    assert "--bucket: '-10s' must not be negative" in line


# 6. bundled aliases in `workloads show` (above) and the README's Python example

def test_readme_python_example_loads_a_bundled_alias(tmp_path):
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL).group(1)
    assert 'load_workload(store, "azure-conv")' in block and 'store.workload("azure-conv")' not in block
    from gpuprobe.workloads.loading import load_workload
    with Store.open(tmp_path / "s.db") as store:
        assert len(load_workload(store, "azure-conv")) == 19_366


# 7. failed requests are dropped without --skip-bad, as the README now says

def test_burstgpt_failed_rows_dropped_without_skip_bad(capsys, tmp_path):
    rc, _, err = gp(capsys, "import", FIXTURES / "burstgpt_small.csv", "--name", "b", "--store", tmp_path / "s.db")
    assert rc == 0 and "dropped 1 rows: failed request (Response tokens 0)" in err
    line = next(ln for ln in README.read_text().splitlines() if "BurstGPT_1.csv" in ln)
    assert "--skip-bad" not in line and "dropped" in line


# 8. synth never stores an empty workload

@pytest.mark.parametrize("argv, needle", [
    (["--daily-cycle", "--cycle-period", "0s"], "--cycle-period: must be more than 0s"),
    (["--rate", "0.0001", "--duration", "1s"], "synth produced no requests: raise --rate or --duration"),
])
def test_synth_degenerate_inputs(capsys, tmp_path, argv, needle):
    db = tmp_path / "s.db"
    assert needle in user_error(capsys, "synth", "--name", "x", *argv, "--store", db)
    assert stored(db) == []
