"""Decision records: recommendations, forecasts, validate results, the autopilot's audit log.
Plain dicts in (keys are the column names; JSON columns take dicts or lists),
DataFrames out. Recommendations and decisions are written once; the only later writes are a
recommendation's `applied_s`/`applied_target` and a decision's `outcome`, each a single field
set once by the command that learns it.
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterable, Mapping

import pandas as pd

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


def _decode(row: dict) -> dict:
    out = {"id": int(row.pop("pk"))}
    for k, v in row.items():
        out[k] = json.loads(v) if k in _JSON_COLUMNS and isinstance(v, str) else v
    return out
