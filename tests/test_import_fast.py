"""The fast CSV path (csvblocks.py): same rows, same skips and same "FILE:LINE: field NAME:
problem" messages as the csv-module path, for clean blocks, broken blocks and mixed files."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuprobe.errors import UserError
from gpuprobe.store import Store
from gpuprobe.workloads.badrows import BadRows
from gpuprobe.workloads.csvblocks import NumberColumn, csv_columns
from gpuprobe.workloads.pipeline import ImportOptions, import_trace

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "s.db") as s:
        yield s


def rows(n, start=0):
    return [f"{i * 0.25:.3f},ChatGPT,{i % 97 + 1},{i % 13 + 1},0,Conversation log\n" for i in range(start, start + n)]


def write(tmp_path, lines, name="f.csv", header=HEADER):
    p = tmp_path / name
    p.write_bytes((header + "".join(lines)).encode() if isinstance(lines[0], str) else header.encode() + b"".join(lines))
    return p


def nothing_stored(store):
    return len(store.workloads()) == 0 and store._conn.execute("SELECT COUNT(*) FROM workload_requests").fetchone()[0] == 0


def test_clean_file_takes_the_fast_path(tmp_path):
    p = write(tmp_path, rows(10))
    pick = lambda h: {"prompt": ("Request tokens", "number"), "model": ("Model", "text")}  # noqa: E731
    (names, lines, cols), = list(csv_columns(p, BadRows(p), 1000, pick))
    assert isinstance(cols["prompt"], NumberColumn) and cols["prompt"][3] == "4"
    assert list(lines) == list(range(2, 12)) and names["prompt"] == "Request tokens"


@pytest.mark.parametrize("noise", ["", "blank", "quote", "crlf"])
def test_bad_value_in_a_big_chunk_names_its_line(store, tmp_path, noise):
    lines = rows(20_000)
    lines[12_000] = "3000.000,ChatGPT,x1,5,0,Conversation log\n"   # file line 12,002
    if noise == "blank":      # a blank line before it: the block goes through the csv module
        lines.insert(10, "\n")
    if noise == "quote":      # a quote before it: the rest of the file goes through the csv module
        lines[5] = '1.250,"Chat,GPT",6,6,0,Conversation log\n'
    if noise == "crlf":
        lines = [s.replace("\n", "\r\n") for s in lines]
    want = 12_003 if noise == "blank" else 12_002
    with pytest.raises(UserError, match=rf"f\.csv:{want}: field Request tokens: 'x1' is not a number \(use --skip-bad"):
        import_trace(store, write(tmp_path, lines), "w")
    assert nothing_stored(store)


def test_token_check_message_uses_file_text(store, tmp_path):
    lines = rows(3000)
    lines[2500] = "625.000,ChatGPT,7,-4,0,Conversation log\n"
    with pytest.raises(UserError, match=r"f\.csv:2502: field Response tokens: '-4' is negative"):
        import_trace(store, write(tmp_path, lines), "w")


def test_mixed_chunks_all_or_nothing_and_skip_exactly_the_bad(store, tmp_path):
    lines = rows(5000)
    lines[2345] = "586.250,ChatGPT,true,3,0,Conversation log\n"   # pandas would read true as 1
    lines[4001] = "1000.250,ChatGPT,5,3,0\n"                        # wrong number of fields
    p = write(tmp_path, lines)
    opts = ImportOptions(chunk_rows=1000)
    with pytest.raises(UserError, match=r"f\.csv:2347: field Request tokens: 'true' is not a number"):
        import_trace(store, p, "w", opts=opts)
    assert nothing_stored(store)
    r = import_trace(store, p, "w", skip_bad=True, opts=opts)
    assert r.skipped == {"field Request tokens: not a number": 1, "wrong number of fields": 1}
    df = store.workload("w")
    assert len(df) == 4998 and r.summary.requests == 4998
    want = np.delete(np.arange(5000) % 97 + 1, [2345, 4001])
    assert (df["prompt_tokens"].to_numpy() == want).all()
    assert store.workload_meta("w")["skipped_first_line"] == {"field Request tokens: not a number": 2347,
                                                             "wrong number of fields": 4003}


def test_bad_utf8_line_is_named(store, tmp_path):
    lines = [s.encode() for s in rows(400)]
    lines[300] = b"75.000,Chat\xff,3,3,0,Conversation log\n"
    with pytest.raises(UserError, match=r"f\.csv:302: not UTF-8 text"):
        import_trace(store, write(tmp_path, lines), "w")


CELL = st.sampled_from(["1", "7", "0", "-2", "1.5", "2.0", " 3", "1e3", "true", "FALSE", "nan", "inf", "", "x",
                        "12345678901", "0x10", "+4", "5.", ".5e1", "1_0"])


@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.tuples(CELL, CELL), min_size=1, max_size=12), skip=st.booleans())
def test_fast_path_agrees_with_csv_module_path(tmp_path, cells, skip):
    """The same rows imported clean (pandas) and with a quoted model on the first row (the csv
    module for the whole file) give the same rows, skips and messages."""
    body = [f"{i},ChatGPT,{a},{b},0,Conversation log\n" for i, (a, b) in enumerate(cells)]
    quoted = ['0,"ChatGPT"' + body[0][len("0,ChatGPT"):]] + body[1:]
    outcomes = []
    for name, lines in (("fast.csv", body), ("slow.csv", quoted)):
        with Store.open(tmp_path / f"{name}.db") as store:
            store._conn.execute("DELETE FROM workload_requests")
            store._conn.execute("DELETE FROM workloads")
            try:
                r = import_trace(store, write(tmp_path, lines, name), "w", skip_bad=skip)
                outcomes.append((r.skipped, r.dropped, store.workload("w").to_dict("list")))
            except UserError as exc:
                outcomes.append(str(exc).replace(name, "F"))
    assert outcomes[0] == outcomes[1]


def test_writer_columns_and_rows_agree(store):
    n = 257  # more than one multi-row INSERT and a remainder
    cols = (np.arange(n) * 0.5, np.arange(n), np.arange(n) % 7, np.array(["m"] * n, dtype=object))
    with store.workload_writer("c") as w:
        w.add_columns(*cols, log_type=None, session_id=np.full(n, None, dtype=object))
        w.commit()
    with store.workload_writer("r") as w:
        w.add(list(zip(*(c.tolist() for c in cols))))
        w.commit()
    a, b = store.workload("c"), store.workload("r")
    assert a.equals(b) and len(a) == n and a["idx"].tolist() == list(range(n))
    assert a["session_id"].isna().all() and a["model"].eq("m").all()


def test_whole_block_of_booleans_is_not_read_as_numbers(store, tmp_path):
    """pandas reads a float column that is all true/false as 1/0; the csv path rejects the text."""
    lines = rows(4)
    lines[2] = "0.500,ChatGPT,true,2,0,Conversation log\n"    # lines 4 and 5: the second block of two
    lines[3] = "0.750,ChatGPT,FALSE,2,0,Conversation log\n"
    with pytest.raises(UserError, match=r"f\.csv:4: field Request tokens: 'true' is not a number"):
        import_trace(store, write(tmp_path, lines), "w", opts=ImportOptions(chunk_rows=2))
