"""Traces recorded by gpuprobe itself (reference server, tap, replay, engine collector): the
`requests` table of a store file, or a CSV/JSONL export of it (columns arrival_s,
prompt_tokens, output_tokens, and optionally status, model, run_id).

Requests whose status is not 'ok' are dropped and counted: a workload is what was served, and a
failed request has no trustworthy output length. `--run-id` picks one run out of a store.
"""
from __future__ import annotations

import sqlite3
from typing import Iterator

import numpy as np

from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import find_columns, make_chunk
from gpuprobe.workloads.readers import csv_chunks, jsonl_chunks

TIME_FIELD = "arrival_s"
COLUMNS = {"time": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens"}
OPTIONAL = {"status": "status", "model": "model", "run_id": "run_id"}
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite(path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(16) == SQLITE_MAGIC


def _convert(cols, lines, c, opts, bad) -> dict:
    n = len(lines)
    status = cols[c["status"]] if "status" in c else ["ok"] * n
    keep = np.array([s in (None, "", "ok") for s in status], dtype=bool)
    if opts.run_id and "run_id" in c:
        keep &= np.array([r == opts.run_id for r in cols[c["run_id"]]], dtype=bool)
    bad.drop("failed request (status not ok)", int((~keep).sum()))
    idx = np.flatnonzero(keep)
    sub = lambda key: [cols[c[key]][i] for i in idx]  # noqa: E731
    lines = [lines[i] for i in idx]
    t, ok_t = convert.seconds(sub("time"), lines, c["time"], bad)
    p, ok_p = convert.tokens(sub("prompt"), lines, c["prompt"], bad)
    o, ok_o = convert.tokens(sub("output"), lines, c["output"], bad)
    model = convert.texts(sub("model")) if "model" in c else None
    return make_chunk(lines, t, p, o, ok_t & ok_p & ok_o, model=model)


def _store_chunks(path, opts, bad) -> Iterator[dict]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        sql = "SELECT pk, arrival_s, prompt_tokens, output_tokens, status, model, run_id FROM requests"
        cur = conn.execute(sql + (" WHERE run_id = ?" if opts.run_id else "") + " ORDER BY arrival_s",
                           (opts.run_id,) if opts.run_id else ())
    except sqlite3.Error as exc:
        bad.fatal(None, f"not a gpuprobe store with a requests table ({exc})")
    try:
        while rows := cur.fetchmany(opts.chunk_rows):
            cols = dict(zip(("pk", "arrival_s", "prompt_tokens", "output_tokens", "status", "model", "run_id"),
                            map(list, zip(*rows))))
            c = {"time": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens",
                 "status": "status", "model": "model"}
            yield _convert(cols, cols["pk"], c, opts, bad)
    finally:
        conn.close()


def chunks(path, opts, bad) -> Iterator[dict]:
    if is_sqlite(path):
        yield from _store_chunks(path, opts, bad)
        return
    with open(path, "rb") as fh:
        jsonl = fh.read(4096).lstrip()[:1] == b"{"
    if jsonl:
        for lines, objs in jsonl_chunks(path, bad, opts.chunk_rows):
            keys = ("arrival_s", "prompt_tokens", "output_tokens", "status", "model", "run_id")
            cols = {k: [o.get(k) for o in objs] for k in keys}
            c = {"time": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens",
                 "status": "status", "model": "model", "run_id": "run_id"}
            yield _convert(cols, lines, c, opts, bad)
        return
    for header, lines, cols in csv_chunks(path, bad, opts.chunk_rows):
        yield _convert(cols, lines, find_columns(header, COLUMNS, path, OPTIONAL), opts, bad)
