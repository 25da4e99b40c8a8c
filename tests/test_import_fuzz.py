"""Fuzz: any bytes given to any importer give a clean import or a UserError, never a traceback."""
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from gpuprobe.errors import UserError
from gpuprobe.store import Store
from gpuprobe.workloads.pipeline import import_trace

HEADERS = [b"TIMESTAMP,ContextTokens,GeneratedTokens\n", b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
           b"arrival_s,prompt_tokens,output_tokens\n", b'{"timestamp": 1, "input_length": 2, "output_length": 3}\n', b""]
ROW = st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode),
                st.lists(st.sampled_from(["1", "-1", "2023-11-16 18:17:03.1", "x", "", "1e999", "nan", "3.5",
                                          '"', "{", "[1]", "99999999999"]), max_size=6).map(lambda v: ",".join(v).encode()))


@pytest.mark.timeout(120)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(HEADERS), rows=st.lists(ROW, max_size=6),
       fmt=st.sampled_from(["auto", "azure", "burstgpt", "mooncake", "recorded"]), skip=st.booleans())
@example(header=b"TIMESTAMP,ContextTokens,GeneratedTokens\n", rows=[b"-0,,"], fmt="auto", skip=False)  # year 0
@example(header=b"", rows=[b'"\x00', b"\x00"], fmt="auto", skip=False)  # a quoted header cell spanning a newline
def test_any_input_clean(tmp_path, header, rows, fmt, skip):
    path = tmp_path / "f.trace"
    path.write_bytes(header + b"\n".join(rows))
    with Store.open(tmp_path / "s.db") as store:
        try:
            r = import_trace(store, path, "w", fmt=fmt, skip_bad=skip, replace=True)
            assert r.summary.requests == len(store.workload("w")) > 0
        except UserError as exc:
            assert str(exc) and "\n" not in str(exc)


def test_error_text_is_one_line_whatever_it_quotes():
    from gpuprobe.errors import GpuprobeError
    exc = UserError("f.csv: columns found: a\nb\x00c")
    assert str(exc) == "f.csv: columns found: a\\nb\\x00c"
    assert "\n" not in str(GpuprobeError("x\r\ny"))
