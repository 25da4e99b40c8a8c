"""BurstGPT CSV: `Timestamp` (seconds from 0:00 of the first day), `Model`, `Request tokens`,
`Response tokens`, `Total tokens`, `Log Type`; newer releases add `Session ID`, `Elapsed time`.

Rows with `Response tokens` 0 are failed requests in BurstGPT's own convention: they are dropped
and counted (not errors). Model and log type are kept.
"""
from __future__ import annotations

from typing import Iterator

from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import find_columns, make_chunk
from gpuprobe.workloads.csvblocks import csv_columns

TIME_FIELD = "Timestamp"
COLUMNS = {"time": "Timestamp", "prompt": "Request tokens", "output": "Response tokens"}
OPTIONAL = {"model": "Model", "log_type": "Log Type", "session_id": "Session ID"}
FAILED = "failed request (Response tokens 0)"


def _pick(path):
    def pick(header):
        found = find_columns(header, COLUMNS, path, OPTIONAL)
        return {k: (name, "number" if k in COLUMNS else "text") for k, name in found.items()}
    return pick


def chunks(path, opts, bad) -> Iterator[dict]:
    for c, lines, cols in csv_columns(path, bad, opts.chunk_rows, _pick(path)):
        t, ok_t = convert.seconds(cols["time"], lines, c["time"], bad)
        p, ok_p = convert.tokens(cols["prompt"], lines, c["prompt"], bad)
        o, ok_o = convert.tokens(cols["output"], lines, c["output"], bad)
        ok = ok_t & ok_p & ok_o
        failed = ok & (o == 0)
        bad.drop(FAILED, int(failed.sum()))
        extra = {k: convert.texts(cols[k]) for k in OPTIONAL if k in cols}
        yield make_chunk(lines, t, p, o, ok & ~failed, **extra)
