"""Mooncake JSONL: one object a line with `timestamp` (ms from the trace start), `input_length`,
`output_length` and `hash_ids` (one id per 512-token prompt block; equal ids are equal prefixes).

hash_ids are kept as JSON text: they are what prefix-cache reuse is estimated from.
"""
from __future__ import annotations

import json
from typing import Iterator

import numpy as np

from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import make_chunk
from gpuprobe.workloads.readers import jsonl_chunks

TIME_FIELD = "timestamp"
BLOCK_TOKENS = 512


def _hash_ids(objs, lines, bad) -> tuple[np.ndarray, np.ndarray]:
    out = np.full(len(objs), None, dtype=object)
    ok = np.ones(len(objs), dtype=bool)
    for i, obj in enumerate(objs):
        ids = obj.get("hash_ids")
        if ids is None:
            continue
        if not isinstance(ids, list) or not all(type(x) is int for x in ids):
            bad.reject(lines[i], "hash_ids", "is not a list of integers", reason="field hash_ids: not a list of integers")
            ok[i] = False
        else:
            out[i] = json.dumps(ids, separators=(",", ":"))
    return out, ok


def chunks(path, opts, bad) -> Iterator[dict]:
    for lines, objs in jsonl_chunks(path, bad, opts.chunk_rows):
        cols = {k: [o.get(k) for o in objs] for k in ("timestamp", "input_length", "output_length")}
        t, ok_t = convert.seconds(cols["timestamp"], lines, "timestamp", bad, unit="ms")
        p, ok_p = convert.tokens(cols["input_length"], lines, "input_length", bad)
        o, ok_o = convert.tokens(cols["output_length"], lines, "output_length", bad)
        h, ok_h = _hash_ids(objs, lines, bad)
        yield make_chunk(lines, t, p, o, ok_t & ok_p & ok_o & ok_h, hash_ids=h)
