"""The server's telemetry writer against a real store file another connection holds locked:
rows wait in memory and land once the lock goes; past its bound the oldest are dropped,
counted, and recorded as one event. In-process, no server."""
from __future__ import annotations

import sqlite3
import time

from waiting import wait_for

from gpuprobe.server.telemetry import TelemetryWriter
from gpuprobe.store import Store


def _row(i: int) -> dict:
    return {"run_id": "r", "source": "server", "request_id": f"q{i:02d}", "arrival_s": 1000.0 + i,
            "status": "ok"}


def _locked_writer(db, **kw):
    """A writer on `db` (flushing every 50 ms, 50 ms busy timeout) and a connection that holds
    the store's write lock until it commits."""
    w = TelemetryWriter(str(db), "r", "h", {}, flush_interval_s=0.05, busy_timeout_s=0.05, **kw)
    locker = sqlite3.connect(db, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    return w, locker


def test_a_locked_store_keeps_the_newest_rows_and_records_the_loss(tmp_path):
    db = tmp_path / "s.db"
    w, locker = _locked_writer(db, max_pending_rows=10)
    try:
        for i in range(25):
            w.add_request(_row(i))
        w.add_event("lease_acquired", "x took the lease")
        # the writer tried, found the store locked, and kept its 10 newest request rows
        wait_for(lambda: w.num_dropped["requests"] == 15, "15 rows dropped")
        assert w.num_pending() == 11 and w.num_written["requests"] == 0
    finally:
        locker.execute("COMMIT")
        locker.close()
    wait_for(lambda: w.num_pending() == 0 and w.num_written["events"] == 1, "the held rows written")
    w.close()
    with Store.open(db, read_only=True) as store:
        reqs, events = store.requests(), store.events(source="server")
    assert list(reqs.request_id) == [f"q{i:02d}" for i in range(15, 25)]
    assert list(events.kind) == ["lease_acquired", "telemetry_dropped"]
    assert events.message.iloc[1].startswith("telemetry dropped 15 requests rows: the store was busy")
    assert w.num_dropped == {"arrivals": 0, "requests": 15, "steps": 0, "layout_events": 0, "events": 0}


def test_rows_held_at_shutdown_are_written_once_the_lock_goes(tmp_path):
    db = tmp_path / "s.db"
    w, locker = _locked_writer(db, close_retry_s=60)
    for i in range(5):
        w.add_request(_row(i))
    wait_for(lambda: w.num_pending() == 5 and w._busy_since is not None, "the store busy")
    w._stop.set()  # close() from here on: it retries until the lock goes
    time.sleep(0.3)
    locker.execute("COMMIT")
    locker.close()
    w.close()
    with Store.open(db, read_only=True) as store:
        assert len(store.requests()) == 5 and store.runs()["ended_s"].notna().all()
    assert sum(w.num_dropped.values()) == 0
