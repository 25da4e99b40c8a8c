"""Where replayed records go while a replay runs: the store (in batches, so Ctrl-C or a crash
loses at most one batch) and a progress bar on stderr."""
from __future__ import annotations

import sys

from gpuprobe.store.records import REQUEST_COLUMNS

BATCH = 200


class RecordSink:
    def __init__(self, store, run_id: str, total: int, progress: bool, meta: dict):
        self._store, self._run_id, self._pending = store, run_id, []
        self._bar = None
        if store is not None:
            store.start_run(run_id, "replay", meta=meta)
        if progress:
            from tqdm import tqdm
            self._bar = tqdm(total=total, file=sys.stderr, unit="req", desc="replay", leave=True)

    def add(self, rec: dict) -> None:
        self._pending.append({k: v for k, v in rec.items() if k in REQUEST_COLUMNS})
        if self._bar is not None:
            self._bar.update(1)
            if rec["status"] != "ok":
                self._bar.set_postfix_str(f"last failure: {rec['status']}", refresh=False)
        if len(self._pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if self._store is not None and self._pending:
            self._store.insert_requests(self._pending)
        self._pending = []

    def close(self) -> None:
        self.flush()
        if self._store is not None:
            self._store.end_run(self._run_id)
        if self._bar is not None:
            self._bar.close()
