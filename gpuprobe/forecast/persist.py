"""Writing a forecast to the store's forecasts table: one row per (series, forecast bucket),
all sharing one forecast_id. lo/hi hold the 80% interval, as the table's older columns did.

A series' note is JSON, {"note": the one-line note, "backtest": its candidates' backtest rows},
so the table that chose the model travels with the forecast (the dashboard's Forecast page
shows it); `note_text` reads either that or an older plain-text note."""
from __future__ import annotations

import json
import time
import uuid


def store_forecast(store, result: dict, workload: str | None = None) -> str:
    """Insert `result` (forecast_workload's dict); returns the new forecast_id."""
    fid = uuid.uuid4().hex[:12]
    now = time.time()
    rows = []
    for metric, s in result["series"].items():
        backtest = [b for b in result.get("backtest", []) if b.get("series") == metric]
        note = json.dumps({"note": s.get("note", ""), "backtest": backtest}, default=_plain)
        for i, t in enumerate(s["t_s"]):
            rows.append({"forecast_id": fid, "as_of_s": result["as_of_s"], "bucket_s": result["bucket_s"],
                         "horizon_s": result["horizon_s"], "metric": metric, "target_s": t,
                         "value": s["mean"][i], "lo": s["lo80"][i], "hi": s["hi80"][i],
                         "lo80": s["lo80"][i], "hi80": s["hi80"][i], "lo95": s["lo95"][i], "hi95": s["hi95"][i],
                         "note": note, "model": s["model"], "workload": workload or "",
                         "created_s": now})
    store.insert_forecasts(rows)
    return fid


def note_text(note) -> str:
    """The one-line note of a stored row (JSON as written above, or plain text)."""
    parsed = _parse(note)
    return str(parsed.get("note", "")) if isinstance(parsed, dict) else ("" if note is None else str(note))


def note_backtest(note) -> list[dict]:
    """The backtest rows a stored note carries ([] for a plain-text note)."""
    parsed = _parse(note)
    return list(parsed.get("backtest") or []) if isinstance(parsed, dict) else []


def _parse(note):
    if not isinstance(note, str) or not note.startswith("{"):
        return None
    try:
        return json.loads(note)
    except ValueError:
        return None


def _plain(v):
    """numpy numbers (fit times, errors) as plain JSON numbers."""
    return v.item() if hasattr(v, "item") else str(v)
