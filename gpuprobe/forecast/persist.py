"""Writing a forecast to the store's forecasts table: one row per (series, forecast bucket),
all sharing one forecast_id. lo/hi hold the 80% interval, as the table's older columns did."""
from __future__ import annotations

import time
import uuid


def store_forecast(store, result: dict, workload: str | None = None) -> str:
    """Insert `result` (forecast_workload's dict); returns the new forecast_id."""
    fid = uuid.uuid4().hex[:12]
    now = time.time()
    rows = []
    for metric, s in result["series"].items():
        for i, t in enumerate(s["t_s"]):
            rows.append({"forecast_id": fid, "as_of_s": result["as_of_s"], "bucket_s": result["bucket_s"],
                         "horizon_s": result["horizon_s"], "metric": metric, "target_s": t,
                         "value": s["mean"][i], "lo": s["lo80"][i], "hi": s["hi80"][i],
                         "lo80": s["lo80"][i], "hi80": s["hi80"][i], "lo95": s["lo95"][i], "hi95": s["hi95"][i],
                         "note": s.get("note", ""), "model": s["model"], "workload": workload or "",
                         "created_s": now})
    store.insert_forecasts(rows)
    return fid
