"""Azure LLM inference traces, 2023 and 2024: `TIMESTAMP, ContextTokens, GeneratedTokens`.

TIMESTAMP is a wall-clock time with any number of fractional digits; 2024 files may carry a
zone (`+00:00`), 2023 files none (taken as UTC).
"""
from __future__ import annotations

from typing import Iterator

from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import find_columns, make_chunk
from gpuprobe.workloads.csvblocks import csv_columns

TIME_FIELD = "TIMESTAMP"
COLUMNS = {"time": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}


KINDS = {"time": "text", "prompt": "number", "output": "number"}


def chunks(path, opts, bad) -> Iterator[dict]:
    def pick(header):
        return {k: (name, KINDS[k]) for k, name in find_columns(header, COLUMNS, path).items()}
    for c, lines, cols in csv_columns(path, bad, opts.chunk_rows, pick):
        t, ok_t = convert.epoch_seconds(cols["time"], lines, c["time"], bad)
        p, ok_p = convert.tokens(cols["prompt"], lines, c["prompt"], bad)
        o, ok_o = convert.tokens(cols["output"], lines, c["output"], bad)
        yield make_chunk(lines, t, p, o, ok_t & ok_p & ok_o)
