"""Request, step, run and event records: plain dicts in, DataFrames out.

Each table's columns are listed here once; `insert_*` takes dicts keyed by those names (missing
keys are NULL, unknown keys are an error so typos do not silently drop data).
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterable, Mapping

import pandas as pd

REQUEST_COLUMNS = (
    "run_id", "source", "request_id", "host", "model", "layout", "workload",
    "arrival_s", "prompt_tokens", "output_tokens", "queue_s", "prefill_start_s", "prefill_end_s",
    "kv_handoff_s", "kv_handoff_bytes", "kv_recv_cpu_s", "kv_xfer_s", "first_token_s", "ttft_s", "tbt_p50_s", "tbt_p99_s",
    "tbt_max_s", "finish_s", "e2e_s", "status", "error", "token_times",
)
STEP_COLUMNS = (
    "run_id", "host", "layout", "role", "worker", "start_s", "duration_s",
    "num_prefill_seqs", "num_prefill_tokens", "num_decode_seqs", "num_decode_ctx_tokens",
    "kv_blocks_used", "kv_blocks_total", "num_preempted", "num_decode_padded_tokens",
    "prefill_q_tokens2",
)
LAYOUT_EVENT_COLUMNS = ("ts_s", "host", "run_id", "from_layout", "to_layout", "prefill_share",
                        "actor", "reason", "status", "detail")
EVENT_COLUMNS = ("ts_s", "host", "source", "device", "kind", "message")
ARRIVAL_COLUMNS = ("run_id", "source", "host", "request_id", "arrival_s", "prompt_tokens",
                   "max_tokens", "status", "reason", "num_in_flight", "num_waiting")
_JSON_COLUMNS = {"token_times", "detail", "slo", "evidence", "params", "candidates", "reasons",
                 "body", "forecast", "predicted", "outcome"}
# Values for NOT NULL columns a record leaves out.
_DEFAULTS = {"host": "", "run_id": "", "device": "", "status": "ok", "detail": "{}", "slo": "{}", "evidence": "{}",
             "params": "{}", "candidates": "[]", "reasons": "[]", "body": "{}", "forecast": "{}",
             "predicted": "{}"}


def _row(table: str, columns: tuple[str, ...], record: Mapping[str, Any]) -> tuple:
    unknown = set(record) - set(columns)
    if unknown:
        raise ValueError(f"{table}: unknown columns {sorted(unknown)}")
    return tuple(json.dumps(record[c]) if c in _JSON_COLUMNS and record.get(c) is not None
                 and not isinstance(record[c], str) else record.get(c, _DEFAULTS.get(c))
                 for c in columns)


class RecordTables:
    """Mixin for Store: measured records and decisions."""

    def _insert(self, table: str, columns: tuple[str, ...], records: Iterable[Mapping[str, Any]]) -> int:
        rows = [_row(table, columns, r) for r in records]
        if rows:
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            self._write(lambda: self._conn.executemany(sql, rows))
        return len(rows)

    def _select(self, table: str, where: dict[str, Any], order: str, since_s: float | None = None,
                time_col: str | None = None) -> pd.DataFrame:
        clauses, args = [], []
        for col, val in where.items():
            if val is not None:
                clauses.append(f"{col} = ?")
                args.append(val)
        if since_s is not None and time_col:
            clauses.append(f"{time_col} >= ?")
            args.append(since_s)
        sql = f"SELECT * FROM {table}" + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
        return self._read(sql + f" ORDER BY {order}", args)

    # requests: one per served, tapped or replayed request
    def insert_requests(self, records: Iterable[Mapping[str, Any]]) -> int:
        return self._insert("requests", REQUEST_COLUMNS, records)

    def requests(self, run_id: str | None = None, source: str | None = None,
                 since_s: float | None = None) -> pd.DataFrame:
        """Columns: REQUEST_COLUMNS plus pk; times in seconds, token_times a JSON list."""
        return self._select("requests", {"run_id": run_id, "source": source}, "arrival_s", since_s, "arrival_s")

    # arrivals: one per request reaching the reference server, written as it arrives
    def insert_arrivals(self, records: Iterable[Mapping[str, Any]]) -> int:
        return self._insert("arrivals", ARRIVAL_COLUMNS, records)

    def arrivals(self, run_id: str | None = None, since_s: float | None = None) -> pd.DataFrame:
        """Columns: ARRIVAL_COLUMNS plus pk; status 'admitted' or http_<code> (refused, with
        `reason`); num_in_flight / num_waiting: what the server held when it arrived."""
        return self._select("arrivals", {"run_id": run_id}, "arrival_s", since_s, "arrival_s")

    # steps: one per engine step of the reference server
    def insert_steps(self, records: Iterable[Mapping[str, Any]]) -> int:
        return self._insert("steps", STEP_COLUMNS, records)

    def steps(self, run_id: str | None = None, role: str | None = None,
              since_s: float | None = None) -> pd.DataFrame:
        return self._select("steps", {"run_id": run_id, "role": role}, "start_s", since_s, "start_s")

    # runs: a serve, replay, tap, agent or validate session
    def start_run(self, run_id: str, kind: str, host: str = "", meta: dict | None = None) -> None:
        self._write(lambda: self._conn.execute(
            "INSERT OR REPLACE INTO runs (run_id, kind, host, started_s, meta) VALUES (?,?,?,?,?)",
            (run_id, kind, host, time.time(), json.dumps(meta or {}))))

    def end_run(self, run_id: str) -> None:
        self._write(lambda: self._conn.execute("UPDATE runs SET ended_s = ? WHERE run_id = ?",
                                               (time.time(), run_id)))

    def runs(self, kind: str | None = None) -> pd.DataFrame:
        return self._select("runs", {"kind": kind}, "started_s")

    def insert_layout_events(self, records: Iterable[Mapping[str, Any]]) -> int:
        return self._insert("layout_events", LAYOUT_EVENT_COLUMNS, records)

    def layout_events(self, host: str | None = None, since_s: float | None = None) -> pd.DataFrame:
        return self._select("layout_events", {"host": host}, "ts_s", since_s, "ts_s")

    def insert_events(self, records: Iterable[Mapping[str, Any]]) -> int:
        return self._insert("events", EVENT_COLUMNS, records)

    def events(self, source: str | None = None, since_s: float | None = None) -> pd.DataFrame:
        return self._select("events", {"source": source}, "ts_s", since_s, "ts_s")

    def save_profile(self, name: str, body: dict, target: str | None = None) -> None:
        self._write(lambda: self._conn.execute(
            "INSERT INTO profiles (created_s, name, target, body) VALUES (?,?,?,?)",
            (time.time(), name, target, json.dumps(body))))

    def load_profile(self, name: str) -> dict | None:
        row = self._conn.execute("SELECT body FROM profiles WHERE name = ? ORDER BY pk DESC LIMIT 1",
                                 (name,)).fetchone()
        return json.loads(row[0]) if row else None
