"""Importers: the bundled Azure traces, fixtures for the other formats, and every bad input."""
import json
from pathlib import Path

import pytest

from gpuprobe.cli.main import main
from gpuprobe.errors import UserError
from gpuprobe.store import Store
from gpuprobe.workloads.pipeline import ImportOptions, import_trace

DATA = Path(__file__).resolve().parent.parent / "gpuprobe" / "data"
FIX = Path(__file__).resolve().parent / "fixtures" / "workloads"


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "s.db") as s:
        yield s


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("trace,n,prompt,output,ratio", [
    ("code", 8819, (1469, 7436), (13, 252), 73.4),
    ("conv", 19366, (1020, 4142), (129, 601), 5.47)])
def test_azure_bundled_match_readme(store, trace, n, prompt, output, ratio):
    r = import_trace(store, DATA / f"azure_llm_2023_{trace}.csv", trace)
    s = r.summary
    assert (r.format, s.requests) == ("azure", n)
    assert (s.prompt_tokens["p50"], s.prompt_tokens["p99"]) == prompt
    assert (s.output_tokens["p50"], s.output_tokens["p99"]) == output
    assert s.prompt_output_ratio == pytest.approx(ratio, abs=0.05)
    assert 3400 < s.span_s < 3600 and s.rate_rps == pytest.approx(n / s.span_s)
    df = store.workload(trace)
    assert len(df) == n and df["arrival_s"].iloc[0] == 0.0 and df["arrival_s"].is_monotonic_increasing


def test_cli_json_keys(tmp_path, capsys):
    rc = main(["import", str(DATA / "azure_llm_2023_code.csv"), "--name", "c", "--store", str(tmp_path / "s.db"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert list(out) == ["name", "requests", "span_s", "rate_rps", "prompt_tokens", "output_tokens", "prompt_output_ratio"]
    assert set(out["prompt_tokens"]) == set(out["output_tokens"]) == {"p50", "p90", "p99"}


def test_azure_2024_zone_and_digits(store, tmp_path):
    p = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.0040000+00:00,10,2\n"
                        "2024-05-10 00:00:01.5+00:00,20,4\n2024-05-10 02:00:02+02:00,30,6\n")
    import_trace(store, p, "a24")
    assert store.workload("a24")["arrival_s"].round(4).tolist() == [0.0, 1.496, 1.996]


def test_mooncake_fixture_keeps_hash_ids(store):
    r = import_trace(store, FIX / "mooncake_small.jsonl", "mc")
    df = store.workload("mc")
    assert r.format == "mooncake" and len(df) == 5
    assert df["arrival_s"].tolist() == [0.0, 1.0, 1.0, 2.5, 3.0]  # ms -> s; duplicate time kept
    assert json.loads(df["hash_ids"].iloc[1]) == [46, 47]


def test_burstgpt_fixture_drops_failures_keeps_model(store):
    r = import_trace(store, FIX / "burstgpt_small.csv", "bg")
    df = store.workload("bg")
    assert r.format == "burstgpt" and len(df) == 4
    assert r.dropped == {"failed request (Response tokens 0)": 1}
    assert df["model"].tolist() == ["ChatGPT", "GPT-4", "ChatGPT", "GPT-4"]
    assert df["log_type"].iloc[2] == "API log" and df["arrival_s"].iloc[1] == 113.0


def test_generic_map_jsonl_ms(store, tmp_path):
    p = write(tmp_path, '{"ts": 1000, "in": 5, "out": 7}\n{"ts": 1500, "in": 6, "out": 8}\n', "g.jsonl")
    import_trace(store, p, "g", opts=ImportOptions(mapping="timestamp=ts,prompt_tokens=in,output_tokens=out",
                                                   time_unit="ms"))
    assert store.workload("g")["arrival_s"].tolist() == [0.0, 0.5]


def test_own_column_names_need_no_map(store, tmp_path, capsys):
    """A CSV or JSONL written with gpuprobe's names is detected and read as itself, by import and
    wherever a workload file is taken (here simulate's --workload)."""
    p = write(tmp_path, "timestamp,prompt_tokens,output_tokens,model\n10,5,6,m\n12.5,7,8,m\n")
    r = import_trace(store, p, "own")
    df = store.workload("own")
    assert r.format == "csv" and df["arrival_s"].tolist() == [0.0, 2.5]
    assert df["prompt_tokens"].tolist() == [5, 7] and df["model"].tolist() == ["m", "m"]
    j = write(tmp_path, '{"timestamp": 1, "prompt_tokens": 3, "output_tokens": 4}\n', "own.jsonl")
    assert import_trace(store, j, "ownj").format == "csv"
    from gpuprobe.workloads.loading import load_workload
    assert load_workload(None, str(p))["output_tokens"].tolist() == [6, 8]


def test_unknown_columns_hint_is_a_whole_command(store, tmp_path):
    p = write(tmp_path, "when,in,out\n1,2,3\n")
    with pytest.raises(UserError) as e:
        import_trace(store, p, "x")
    msg = str(e.value)
    assert "columns found: in, out, when" in msg and "rename the columns" in msg
    assert "`gpuprobe import " + str(p) + " --format csv --map timestamp=COL" in msg


def test_recorded_export_and_store(store, tmp_path):
    store.insert_requests([{"source": "serve", "request_id": str(i), "arrival_s": 100.0 + i, "prompt_tokens": 9,
                            "output_tokens": 3, "status": "ok" if i else "http_429"} for i in range(4)])
    r = import_trace(store, store.path, "rec")
    assert r.format == "recorded" and len(store.workload("rec")) == 3 and sum(r.dropped.values()) == 1
    p = write(tmp_path, "arrival_s,prompt_tokens,output_tokens,status\n1.0,5,6,ok\n2.0,5,6,ok\n")
    assert import_trace(store, p, "rec2").summary.requests == 2


def test_broken_row_names_file_line_field_and_stores_nothing(store, tmp_path):
    p = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,10,2\n"
                        "2023-11-16 18:17:04.1,ten,2\n")
    with pytest.raises(UserError, match=r"t\.csv:3: field ContextTokens: 'ten' is not a number"):
        import_trace(store, p, "x")
    assert store.workload_id("x") is None and len(store.workloads()) == 0


def test_skip_bad_counts_reasons(store, tmp_path):
    p = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,10,2\n"
                        "nonsense,10,2\n2023-11-16 18:17:05.1,-3,2\n2023-11-16 18:17:06.1,20000000,2\n"
                        "2023-11-16 18:17:07.1,1,2,9\n2023-11-16 18:17:08.1,4,5\n")
    r = import_trace(store, p, "x", skip_bad=True)
    assert r.summary.requests == 2
    assert r.skipped == {"field TIMESTAMP: not a date-time": 1, "field ContextTokens: negative": 1,
                         "field ContextTokens: absurd token count": 1, "wrong number of fields": 1}


@pytest.mark.parametrize("value,problem", [("-5", "is negative"), ("10000001", "is more than 10,000,000"),
                                           ("1.5", "not a whole number")])
def test_bad_token_counts(store, tmp_path, value, problem):
    p = write(tmp_path, f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,{value},2\n")
    with pytest.raises(UserError, match=f":2: field ContextTokens: .*{problem}"):
        import_trace(store, p, "x")


def test_empty_header_only_unknown(store, tmp_path):
    with pytest.raises(UserError, match="file is empty"):
        import_trace(store, write(tmp_path, "", "e.csv"), "x")
    with pytest.raises(UserError, match="no requests to import"):
        import_trace(store, write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n", "h.csv"), "x")
    with pytest.raises(UserError, match=r"u\.csv: unknown trace format \(tried azure, burstgpt, mooncake"):
        import_trace(store, write(tmp_path, "a,b\n1,2\n", "u.csv"), "x")


def test_out_of_order_sorted_and_duplicates_kept(store, tmp_path):
    p = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n5,1,1\n3,2,2\n3,3,3\n9,4,4\n")
    r = import_trace(store, p, "o")
    df = store.workload("o")
    assert r.num_reordered == 2
    assert df["arrival_s"].tolist() == [0.0, 0.0, 2.0, 6.0] and df["prompt_tokens"].tolist() == [2, 3, 1, 4]


def test_too_far_out_of_order_is_a_bad_row(store, tmp_path):
    p = write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n5,1,1\n6,1,1\n7,1,1\n1,1,1\n")
    opts = ImportOptions(window_rows=1, chunk_rows=1)
    with pytest.raises(UserError, match=":5: field arrival_s: .*out of order"):
        import_trace(store, p, "o", opts=opts)
    assert import_trace(store, p, "o", skip_bad=True, opts=opts).summary.requests == 3


def test_name_exists_refused_unless_replace(store, tmp_path, capsys):
    p = FIX / "burstgpt_small.csv"
    import_trace(store, p, "n")
    with pytest.raises(UserError, match="already exists"):
        import_trace(store, p, "n")
    assert import_trace(store, FIX / "mooncake_small.jsonl", "n", replace=True).summary.requests == 5
    rc = main(["import", str(p), "--name", "n", "--store", str(store.path)])
    assert rc == 2 and "already exists (use --replace" in capsys.readouterr().err


def test_chunked_path_matches_one_chunk(store):
    a = import_trace(store, DATA / "azure_llm_2023_code.csv", "a").summary
    b = import_trace(store, DATA / "azure_llm_2023_code.csv", "b", opts=ImportOptions(chunk_rows=999,
                                                                                      window_rows=50)).summary
    assert a.to_dict() | {"name": ""} == b.to_dict() | {"name": ""}
    assert store.workload("a")["arrival_s"].equals(store.workload("b")["arrival_s"])
