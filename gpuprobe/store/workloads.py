"""Workloads: imported or synthetic traces, each a named list of requests.

A workload is written through `WorkloadWriter` in chunks under a hidden staging name and
renamed in one transaction at the end, so an import that fails half-way stores nothing and a
5-million-row import neither holds the write lock for its whole length nor holds all rows in
memory.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError

WORKLOAD_REQUEST_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "model", "log_type",
                            "session_id", "hash_ids")
_STAGING = ".importing."
_ROWS_PER_INSERT = 200
_MAX_VARIABLES = 999  # SQLite's smallest compiled-in limit on ? per statement


def _all_null(values) -> bool:
    if isinstance(values, np.ndarray):
        return values.dtype == object and bool(np.equal(values, None).all())
    return values is None or all(v is None for v in values)


class WorkloadWriter:
    """Append rows (tuples in WORKLOAD_REQUEST_COLUMNS order; trailing ones may be missing),
    then `commit()`. Used as a context manager, an exception discards everything written."""

    def __init__(self, store, name: str, source: str = "", fmt: str = "", replace: bool = False,
                 meta: dict | None = None):
        if not name or name.startswith(_STAGING):
            raise UserError(f"workload name {name!r} is not allowed")
        if not replace and store.workload_id(name) is not None:
            raise UserError(f"workload {name!r} already exists (use --replace to overwrite it)")
        self._store, self.name, self._replace = store, name, replace
        self._meta = dict(meta or {})
        self.num_requests = 0
        self._idx = 0
        staging = _STAGING + uuid.uuid4().hex
        cur = store._write(lambda: store._conn.execute(
            "INSERT INTO workloads (name, created_s, source, format, meta) VALUES (?,?,?,?,?)",
            (staging, time.time(), source, fmt, "{}")))
        self._id = cur.lastrowid

    def add(self, rows: Sequence[Sequence]) -> None:
        width = len(WORKLOAD_REQUEST_COLUMNS)
        rows = [tuple(r) + (None,) * (width - len(r)) for r in rows]
        if rows:
            self.add_columns(*map(list, zip(*rows)))

    def add_columns(self, arrival_s, prompt_tokens, output_tokens, model=None, log_type=None,
                    session_id=None, hash_ids=None) -> None:
        """Append rows given as columns (arrays or lists of equal length; arrival_s in seconds,
        token counts as ints; the text columns may be None or hold None for NULL)."""
        given = dict(zip(WORKLOAD_REQUEST_COLUMNS, (arrival_s, prompt_tokens, output_tokens, model,
                                                   log_type, session_id, hash_ids)))
        num = len(arrival_s)
        # Columns that are all NULL are left out of the INSERT: fewer values to bind per row.
        cols = {c: v for i, (c, v) in enumerate(given.items()) if i < 3 or not _all_null(v)}
        if num == 0:
            return
        table = np.empty((num, 1 + len(cols)), dtype=object)
        table[:, 0] = list(range(self._idx, self._idx + num))
        for j, values in enumerate(cols.values(), start=1):
            table[:, j] = values.tolist() if isinstance(values, np.ndarray) else list(values)
        self._store._write(lambda: self._insert(list(cols), table))
        self._idx += num
        self.num_requests = self._idx

    def _insert(self, names: list[str], table: np.ndarray) -> None:
        """Many rows per INSERT statement: per-statement overhead, not SQLite, bounds a plain executemany."""
        width = table.shape[1]
        per = max(1, min(_ROWS_PER_INSERT, _MAX_VARIABLES // width))
        head = f"INSERT INTO workload_requests (workload_id, idx, {', '.join(names)}) VALUES "
        one = f"({int(self._id)}, {', '.join('?' * width)})"
        full = len(table) // per * per
        conn = self._store._conn
        if full:
            conn.executemany(head + ", ".join([one] * per), table[:full].reshape(-1, per * width).tolist())
        if full < len(table):
            conn.executemany(head + one, table[full:].tolist())

    def commit(self, meta: dict | None = None) -> int:
        """Publish the workload under its name; returns its id."""
        self._meta.update(meta or {})
        conn = self._store._conn

        def publish():
            old = conn.execute("SELECT id FROM workloads WHERE name = ?", (self.name,)).fetchone()
            if old and not self._replace:
                raise UserError(f"workload {self.name!r} already exists (use --replace to overwrite it)")
            if old:
                conn.execute("DELETE FROM workload_requests WHERE workload_id = ?", (old[0],))
                conn.execute("DELETE FROM workloads WHERE id = ?", (old[0],))
            conn.execute("UPDATE workloads SET name = ?, num_requests = ?, meta = ? WHERE id = ?",
                         (self.name, self.num_requests, json.dumps(self._meta), self._id))
        self._store._write(publish)
        return self._id

    def discard(self) -> None:
        conn = self._store._conn

        def drop():
            conn.execute("DELETE FROM workload_requests WHERE workload_id = ?", (self._id,))
            conn.execute("DELETE FROM workloads WHERE id = ?", (self._id,))
        self._store._write(drop)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.discard()
        return False


class WorkloadTables:
    """Mixin for Store: workloads and their requests."""

    def workload_writer(self, name: str, **kw) -> WorkloadWriter:
        return WorkloadWriter(self, name, **kw)

    def save_workload(self, name: str, requests: pd.DataFrame | Iterable[Sequence], source: str = "",
                      fmt: str = "", replace: bool = False, meta: dict | None = None) -> int:
        """Store a whole workload at once. `requests` has WORKLOAD_REQUEST_COLUMNS (at least
        arrival_s, prompt_tokens, output_tokens)."""
        if isinstance(requests, pd.DataFrame):
            cols = [c for c in WORKLOAD_REQUEST_COLUMNS if c in requests.columns]
            rows = list(requests[cols].astype(object).where(requests[cols].notna(), None)
                        .itertuples(index=False, name=None))
            if cols != list(WORKLOAD_REQUEST_COLUMNS[:len(cols)]):
                rows = [tuple(r[cols.index(c)] if c in cols else None for c in WORKLOAD_REQUEST_COLUMNS)
                        for r in rows]
        else:
            rows = list(requests)
        with self.workload_writer(name, source=source, fmt=fmt, replace=replace, meta=meta) as w:
            for i in range(0, len(rows), 50_000):
                w.add(rows[i:i + 50_000])
            return w.commit()

    def workload_id(self, name: str) -> int | None:
        row = self._conn.execute("SELECT id FROM workloads WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def workloads(self) -> pd.DataFrame:
        """Columns: id, name, created_s, source, format, num_requests, meta (JSON text)."""
        return self._read("SELECT * FROM workloads WHERE name NOT LIKE '.importing.%' ORDER BY name")

    def workload_meta(self, name: str) -> dict:
        row = self._conn.execute("SELECT meta FROM workloads WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UserError(f"no workload named {name!r} in the store")
        return json.loads(row[0])

    def workload(self, name: str, limit: int | None = None) -> pd.DataFrame:
        """The requests of a workload ordered by arrival. Columns: idx, arrival_s (seconds from
        the first request), prompt_tokens, output_tokens, model, log_type, session_id, hash_ids
        (JSON list or None). attrs["gpuprobe_format"]: the format it was imported from."""
        row = self._conn.execute("SELECT id, format FROM workloads WHERE name = ?",
                                 (name,)).fetchone()
        if row is None:
            raise UserError(f"no workload named {name!r} in the store")
        wid = row[0]
        sql = ("SELECT idx, " + ", ".join(WORKLOAD_REQUEST_COLUMNS) +
               " FROM workload_requests WHERE workload_id = ? ORDER BY idx")
        args: list = [wid]
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        df = self._read(sql, args)
        df.attrs["gpuprobe_format"] = row[1]
        return df

    def delete_workload(self, name: str) -> bool:
        wid = self.workload_id(name)
        if wid is None:
            return False

        def drop():
            self._conn.execute("DELETE FROM workload_requests WHERE workload_id = ?", (wid,))
            self._conn.execute("DELETE FROM workloads WHERE id = ?", (wid,))
        self._write(drop)
        return True
