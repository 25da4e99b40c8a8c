"""Azure LLM inference traces, 2023 and 2024: `TIMESTAMP, ContextTokens, GeneratedTokens`.

TIMESTAMP is a wall-clock time with any number of fractional digits; 2024 files may carry a
zone (`+00:00`), 2023 files none (taken as UTC).
"""
from __future__ import annotations

from typing import Iterator

from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import find_columns, make_chunk
from gpuprobe.workloads.readers import csv_chunks

TIME_FIELD = "TIMESTAMP"
COLUMNS = {"time": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}


def chunks(path, opts, bad) -> Iterator[dict]:
    for header, lines, cols in csv_chunks(path, bad, opts.chunk_rows):
        c = find_columns(header, COLUMNS, path)
        t, ok_t = convert.epoch_seconds(cols[c["time"]], lines, c["time"], bad)
        p, ok_p = convert.tokens(cols[c["prompt"]], lines, c["prompt"], bad)
        o, ok_o = convert.tokens(cols[c["output"]], lines, c["output"], bad)
        yield make_chunk(lines, t, p, o, ok_t & ok_p & ok_o)
