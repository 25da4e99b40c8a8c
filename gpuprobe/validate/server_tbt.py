"""TBT as the server's front saw it: the token times the front stamps when a worker's step
reaches it, from the request rows the server stored during each replay.

validate's load client runs on the same cores as the server, and its own reading of the
streams adds to the gaps it measures (on azure-conv, about a third of cross's p99: see
docs/model-log.md, "Front or client?"). The front's stamps leave that out, so the two side by
side tell the server's gaps from the harness's.
"""
from __future__ import annotations

import json

import pandas as pd

from gpuprobe.perf.metrics import gaps_from_token_times, tbt_summary

# The client's records of one replay and the server's rows of the same requests share the
# wall clock. A replayed request reaches the server after the client sent it and before it
# finished; the phases before and after a replay (calibration, recheck) do not overlap it.
LATE_S = 0.25  # most a request takes from the client's send to the server's arrival stamp


def server_tbt(db_path: str, replays: list[pd.DataFrame]) -> list[dict]:
    """Per replay: {'tbt_p50_s', 'tbt_p99_s', 'tbt_gaps'} from the server's request rows."""
    from gpuprobe.store import Store

    with Store.open(db_path, read_only=True) as store:
        rows = store.requests(source="server")
    out = []
    for rec in replays:
        lo = rec["arrival_s"].min()
        hi = min(rec["arrival_s"].max() + LATE_S, rec["finish_s"].max())
        mine = rows[(rows["arrival_s"] >= lo) & (rows["arrival_s"] <= hi) & (rows["status"] == "ok")]
        times = [json.loads(t) if isinstance(t, str) else t for t in mine["token_times"]]
        gaps = gaps_from_token_times([t for t in times if t])
        s = tbt_summary(gaps)
        out.append({"tbt_p50_s": s["tbt_p50_s"], "tbt_p99_s": s["tbt_p99_s"], "tbt_gaps": int(len(gaps))})
    return out

