"""Traces recorded by gpuprobe itself (reference server, tap, replay, engine collector): the
`requests` table of a store file, or a CSV/JSONL export of it (columns arrival_s,
prompt_tokens, output_tokens, and optionally status, model, run_id).

Requests whose status is not 'ok' are dropped and counted: a workload is what was served, and a
failed request has no trustworthy output length. `--run-id` picks one run out of a store;
without it, one recording source of a store is imported: the replay client's rows if it has
them, else the tap's, else the server's (each replayed request is recorded by all on its path).
"""
from __future__ import annotations

import sqlite3
from typing import Iterator

import numpy as np

from gpuprobe.errors import UserError
from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import find_columns, make_chunk
from gpuprobe.workloads.csvblocks import NumberColumn, csv_columns
from gpuprobe.workloads.readers import jsonl_chunks

TIME_FIELD = "arrival_s"
COLUMNS = {"time": "arrival_s", "prompt": "prompt_tokens", "output": "output_tokens"}
OPTIONAL = {"status": "status", "model": "model", "run_id": "run_id"}
SQLITE_MAGIC = b"SQLite format 3\x00"
SOURCES = ("replay", "tap", "server")  # recorders of a store's requests, nearest the client first


def is_sqlite(path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(16) == SQLITE_MAGIC


def _subset(values, idx: np.ndarray):
    if isinstance(values, NumberColumn):
        return values.take(idx)
    if isinstance(values, np.ndarray):
        return values[idx]
    return [values[i] for i in idx.tolist()]


def _is_ok(status) -> np.ndarray:
    if isinstance(status, np.ndarray):  # a clean CSV block: all str
        return (status == "") | (status == "ok")
    return np.array([s in (None, "", "ok") for s in status], dtype=bool)


def _convert(cols, lines, names, opts, bad) -> dict:
    """`cols` and `names` (the source's spelling, for messages) are keyed by our keys."""
    n = len(lines)
    keep = _is_ok(cols["status"]) if "status" in cols else np.ones(n, dtype=bool)
    if opts.run_id and "run_id" in cols:
        keep &= np.array([r == opts.run_id for r in cols["run_id"]], dtype=bool)
    bad.drop("failed request (status not ok)", int((~keep).sum()))
    if not keep.all():
        idx = np.flatnonzero(keep)
        cols, lines = {k: _subset(v, idx) for k, v in cols.items()}, _subset(lines, idx)
    t, ok_t = convert.seconds(cols["time"], lines, names["time"], bad)
    p, ok_p = convert.tokens(cols["prompt"], lines, names["prompt"], bad)
    o, ok_o = convert.tokens(cols["output"], lines, names["output"], bad)
    model = convert.texts(cols["model"]) if "model" in cols else None
    return make_chunk(lines, t, p, o, ok_t & ok_p & ok_o, model=model)


def _runs_text(conn) -> str:
    runs = [r for (r,) in conn.execute("SELECT DISTINCT run_id FROM requests ORDER BY run_id")]
    shown = ", ".join(repr(r) for r in runs[:10]) or "none"
    return shown + (f" ({len(runs):,} in all)" if len(runs) > 10 else "")


def _where(conn, path, opts, bad) -> tuple[str, tuple]:
    """The rows to import: the --run-id run, else the rows of one recording source (a replay
    through a tap to gpuprobe's server records each request three times: sources 'replay',
    'tap' and 'server'); the first of SOURCES the store has, nearest the client, is kept and
    the other rows are counted as dropped."""
    if opts.run_id:
        if not conn.execute("SELECT 1 FROM requests WHERE run_id = ? LIMIT 1", (opts.run_id,)).fetchone():
            raise UserError(f"no run {opts.run_id!r} in {path}; runs: {_runs_text(conn)}")
        return " WHERE run_id = ?", (opts.run_id,)
    counts = dict(conn.execute("SELECT source, COUNT(*) FROM requests GROUP BY source").fetchall())
    if len(counts) <= 1:
        return "", ()
    keep = next((s for s in SOURCES if s in counts), None)
    if keep is None:
        raise UserError(f"{path}: requests recorded by several sources ({', '.join(sorted(counts))}); "
                        f"pick one run with --run-id (runs: {_runs_text(conn)})")
    for source, n in counts.items():
        if source != keep:
            bad.drop(f"source {source!r}: only {keep!r} rows are imported without --run-id", n)
    return " WHERE source = ?", (keep,)


def _store_chunks(path, opts, bad) -> Iterator[dict]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        try:
            where, args = _where(conn, path, opts, bad)
            cur = conn.execute("SELECT pk, arrival_s, prompt_tokens, output_tokens, status, model, run_id "
                               "FROM requests" + where + " ORDER BY arrival_s", args)
        except sqlite3.Error as exc:
            bad.fatal(None, f"not a gpuprobe store with a requests table ({exc})")
        while rows := cur.fetchmany(opts.chunk_rows):
            pk, *values = map(list, zip(*rows))
            cols = dict(zip(("time", "prompt", "output", "status", "model"), values))
            yield _convert(cols, pk, {**COLUMNS, **OPTIONAL}, opts, bad)
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
            names = {**COLUMNS, **OPTIONAL}
            cols = {k: [o.get(name) for o in objs] for k, name in names.items()}
            yield _convert(cols, lines, names, opts, bad)
        return

    def pick(header):
        found = find_columns(header, COLUMNS, path, OPTIONAL)
        return {k: (name, "number" if k in COLUMNS else "text") for k, name in found.items()}
    for names, lines, cols in csv_columns(path, bad, opts.chunk_rows, pick):
        yield _convert(cols, lines, names, opts, bad)
