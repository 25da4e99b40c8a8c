"""Decision records: recommendations, forecasts, validate results, the autopilot's audit log
and its lock. Plain dicts in (keys are the column names; JSON columns take dicts or lists),
DataFrames out. Recommendations and decisions are written once; the only later writes are a
recommendation's `applied_s`/`applied_target` and a decision's `outcome`, each a single field
set once by the command that learns it.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Iterable, Mapping

import pandas as pd

from gpuprobe.errors import StoreError
from gpuprobe.store.records import _JSON_COLUMNS, _row

RECOMMENDATION_COLUMNS = (
    "created_s", "host", "workload", "layout", "prefill_share", "confidence", "slo", "evidence",
    "applied_s", "params", "candidates", "reasons", "confidence_label", "max_goodput_rps_per_device",
    "margin", "profile", "body", "applied_target",
)
FORECAST_COLUMNS = ("created_s", "workload", "model", "target_s", "metric", "value", "lo", "hi",
                    "forecast_id", "as_of_s", "bucket_s", "horizon_s", "lo80", "hi80", "lo95",
                    "hi95", "note")
VALIDATION_COLUMNS = ("created_s", "host", "workload", "model", "device", "profile",
                      "best_measured", "best_predicted", "bar_met", "body")
DECISION_COLUMNS = ("ts_s", "host", "target", "window_start_s", "window_end_s", "current_layout",
                    "chosen_layout", "params", "action", "reason", "forecast", "candidates",
                    "predicted", "recommendation_id", "outcome", "outcome_s")
LOCK_STALE_S = 120.0  # a holder that has not beaten its heartbeat for this long is gone


class DecisionTables:
    """Mixin for Store: what the decision half writes and reads."""

    def _insert_one(self, table: str, columns: tuple[str, ...], record: Mapping[str, Any]) -> int:
        row = _row(table, columns, record)
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        return int(self._write(lambda: self._conn.execute(sql, row).lastrowid))

    # recommendations: one per `recommend` answer; its pk is the recommendation's id
    def insert_recommendation(self, record: Mapping[str, Any]) -> int:
        """Store one recommendation; returns its id."""
        return self._insert_one("recommendations", RECOMMENDATION_COLUMNS,
                                {"created_s": time.time(), **record})

    def insert_recommendations(self, records: Iterable[Mapping[str, Any]]) -> int:
        return sum(1 for r in records if self.insert_recommendation(r))

    def recommendations(self, workload: str | None = None) -> pd.DataFrame:
        return self._select("recommendations", {"workload": workload}, "created_s")

    def recommendation(self, rec_id: int) -> dict | None:
        """One recommendation as a dict (JSON columns decoded, `id` = pk), or None."""
        df = self._read("SELECT * FROM recommendations WHERE pk = ?", (int(rec_id),))
        return _decode(df.iloc[0].to_dict()) if len(df) else None

    def mark_recommendation_applied(self, rec_id: int, target: str, ts_s: float | None = None) -> None:
        self._write(lambda: self._conn.execute(
            "UPDATE recommendations SET applied_s = ?, applied_target = ? WHERE pk = ?",
            (ts_s or time.time(), target, int(rec_id))))

    # forecasts: one row per (forecast_id, metric, forecast bucket)
    def insert_forecasts(self, records: Iterable[Mapping[str, Any]]) -> int:
        return self._insert("forecasts", FORECAST_COLUMNS, records)

    def forecasts(self, workload: str | None = None, forecast_id: str | None = None) -> pd.DataFrame:
        return self._select("forecasts", {"workload": workload, "forecast_id": forecast_id},
                            "created_s, metric, target_s")

    # validations: one per `validate` run
    def insert_validation(self, record: Mapping[str, Any]) -> int:
        return self._insert_one("validations", VALIDATION_COLUMNS, {"created_s": time.time(), **record})

    def validations(self, workload: str | None = None) -> pd.DataFrame:
        return self._select("validations", {"workload": workload}, "created_s")

    # decisions: the autopilot's audit log
    def insert_decision(self, record: Mapping[str, Any]) -> int:
        return self._insert_one("decisions", DECISION_COLUMNS, {"ts_s": time.time(), **record})

    def set_decision_outcome(self, decision_id: int, outcome: Mapping[str, Any]) -> None:
        self._write(lambda: self._conn.execute(
            "UPDATE decisions SET outcome = ?, outcome_s = ? WHERE pk = ?",
            (json.dumps(outcome), time.time(), int(decision_id))))

    def decisions(self, target: str | None = None, since_s: float | None = None) -> pd.DataFrame:
        return self._select("decisions", {"target": target}, "ts_s", since_s, "ts_s")

    # locks: one holder per name (the autopilot takes "autopilot:<target>")
    def acquire_lock(self, name: str, stale_s: float = LOCK_STALE_S) -> None:
        """Take `name` for this host and pid, or raise StoreError naming the holder. A lock
        whose holder has not renewed it for `stale_s`, or whose pid on this host is gone, is
        taken over."""
        host, pid, now = socket.gethostname(), os.getpid(), time.time()

        def take():
            row = self._conn.execute("SELECT holder_host, holder_pid, heartbeat_s FROM locks "
                                     "WHERE name = ?", (name,)).fetchone()
            if row and (row[0], row[1]) != (host, pid) and not _gone(row, host, now, stale_s):
                return f"{name} is held by pid {row[1]} on {row[0]} (renewed {now - row[2]:.0f} s ago)"
            self._conn.execute("INSERT OR REPLACE INTO locks VALUES (?,?,?,?,?)",
                               (name, host, pid, now, now))
            return None
        held = self._write(take)
        if held:
            raise StoreError(held)

    def renew_lock(self, name: str) -> None:
        self._write(lambda: self._conn.execute(
            "UPDATE locks SET heartbeat_s = ? WHERE name = ? AND holder_host = ? AND holder_pid = ?",
            (time.time(), name, socket.gethostname(), os.getpid())))

    def release_lock(self, name: str) -> None:
        self._write(lambda: self._conn.execute(
            "DELETE FROM locks WHERE name = ? AND holder_host = ? AND holder_pid = ?",
            (name, socket.gethostname(), os.getpid())))

    def locks(self) -> pd.DataFrame:
        return self._read("SELECT * FROM locks ORDER BY name")


def _gone(row: tuple, host: str, now: float, stale_s: float) -> bool:
    holder_host, holder_pid, heartbeat_s = row
    if now - heartbeat_s > stale_s:
        return True
    if holder_host == host:
        try:
            os.kill(int(holder_pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def _decode(row: dict) -> dict:
    out = {"id": int(row.pop("pk"))}
    for k, v in row.items():
        out[k] = json.loads(v) if k in _JSON_COLUMNS and isinstance(v, str) else v
    return out
