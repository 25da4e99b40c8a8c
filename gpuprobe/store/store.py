"""The embedded store: one SQLite file shared by one writer and many readers.

    store = Store.open("gpuprobe.db")          # checks, creates or migrates the file
    store = Store.open(path, create=False)     # a reader: a missing file is an error, not a new store
    store.insert_samples([Sample(...), ...])   # batched, one transaction
    df = store.downsample("sm_util_pct", t0, t1, max_points=2000)

Every read returns a pandas DataFrame whose column names carry their units.
"""
from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from gpuprobe.errors import StoreError
from gpuprobe.store.connection import connect, create_store, inspect_version, migrate, resolve_path
from gpuprobe.store.decisions import DecisionTables
from gpuprobe.store.records import RecordTables
from gpuprobe.store.samples import SampleTables
from gpuprobe.store.workloads import WorkloadTables


class Store(SampleTables, RecordTables, DecisionTables, WorkloadTables):
    def __init__(self, path: Path, conn: sqlite3.Connection, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        self._conn = conn
        self._lock = threading.RLock()
        self._series_cache: dict = {}

    @classmethod
    def open(cls, path: str | Path | None = None, read_only: bool = False,
             busy_timeout_s: float = 10.0, create: bool = True) -> "Store":
        """Open (migrating as needed) the store at `path`, $GPUPROBE_STORE or ./gpuprobe.db; a
        missing file is created unless `create` is False or `read_only` is set.

        Raises StoreError, leaving the file untouched, when it is missing and not to be created,
        is not a gpuprobe store (an empty file included), was written by a newer schema, or
        stays locked past `busy_timeout_s`.
        """
        path = resolve_path(path)
        if not path.exists():
            if read_only or not create:
                raise StoreError(f"no store at {path}")
            if not path.parent.exists():
                raise StoreError(f"{path}: folder {path.parent} does not exist")
            create_store(path)
        version = inspect_version(path)
        if read_only:
            return cls(path, connect(path, busy_timeout_s, read_only=True), read_only=True)
        try:
            conn = connect(path, busy_timeout_s)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{path}: cannot open ({exc})") from None
        migrate(conn, path, version)
        return cls(path, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` in one write transaction; map lock and disk-full errors to StoreError."""
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"{self.path}: locked by another process ({exc})") from None
            try:
                result = fn()
                self._conn.execute("COMMIT")
                return result
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreError(f"{self.path}: write failed ({exc})") from None
                raise

    @contextlib.contextmanager
    def reading(self):
        """Hold the store's one connection for a group of reads: a Store shared by threads (the
        dashboard's, one per process for every browser session) is read one thread at a time."""
        with self._lock:
            yield self

    def _read(self, sql: str, args: list | tuple = ()) -> pd.DataFrame:
        with self._lock:
            return pd.read_sql_query(sql, self._conn, params=list(args))

    def schema_version(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
