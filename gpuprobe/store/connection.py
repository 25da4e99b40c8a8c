"""Opening a store file: check it is ours, migrate it forward, and hand out WAL connections.

One writer and many readers in other processes work at once: the file is in WAL mode, readers
never block the writer, and a writer waits up to `busy_timeout_s` for another writer.
"""
from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

from gpuprobe.errors import StoreError
from gpuprobe.store.schema import APP_ID, MIGRATIONS, SCHEMA_VERSION

DEFAULT_PATH = "gpuprobe.db"


def resolve_path(path: str | os.PathLike | None = None) -> Path:
    """`--store` if given, else $GPUPROBE_STORE, else ./gpuprobe.db."""
    return Path(path or os.environ.get("GPUPROBE_STORE") or DEFAULT_PATH)


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def inspect_version(path: Path) -> int:
    """The schema version of an existing file (0 for an SQLite file without tables); raises
    StoreError if not ours.

    Reads only: a file that is not a gpuprobe store is never written to.
    """
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a gpuprobe store")
    if path.stat().st_size == 0:
        raise StoreError(f"{path}: not a gpuprobe store (an empty file)")
    # The header is read through SQLite, never with open(): closing any descriptor of the
    # file drops every POSIX lock this process holds on it, so another connection here (the
    # dashboard's cached reader, while Apply opens the store) would lose its WAL read lock and
    # could read a snapshot another process has since checkpointed away.
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            header = conn.execute("PRAGMA schema_version").fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        header = None
    if header is None:
        raise StoreError(f"{path}: not a gpuprobe store (not an SQLite database)")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return 0
            if "meta" not in tables:
                raise StoreError(f"{path}: not a gpuprobe store (an SQLite database of something else)")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and _is_locked(exc):
            raise StoreError(f"{path}: locked by another process") from None
        raise StoreError(f"{path}: not a usable gpuprobe store ({exc})") from None
    if meta.get("app") != APP_ID:
        raise StoreError(f"{path}: not a gpuprobe store (an SQLite database of something else)")
    version = int(meta.get("schema_version", "0"))
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: written by a newer gpuprobe (schema {version}; this version knows up to "
            f"{SCHEMA_VERSION}); upgrade gpuprobe to read it")
    return version


def create_store(path: Path) -> None:
    """A new store at `path`, which does not exist: built and migrated under a temporary name,
    then linked into place, so another process never sees a half-made file and an existing
    file is never replaced."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    try:
        conn = connect(tmp)
        try:
            migrate(conn, tmp, 0)
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it meanwhile: that one is used
        except OSError:  # a file system without hard links
            os.replace(tmp, path)
    except sqlite3.OperationalError as exc:
        raise StoreError(f"{path}: cannot create ({exc})") from None
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def connect(path: Path, busy_timeout_s: float = 10.0, read_only: bool = False) -> sqlite3.Connection:
    """A connection in WAL mode with a busy timeout; autocommit, transactions are explicit."""
    if read_only:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_timeout_s,
                               isolation_level=None, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across process crashes in WAL mode; only an OS crash can lose
        # the last transactions.
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    return conn


def migrate(conn: sqlite3.Connection, path: Path, from_version: int) -> None:
    """Apply forward migrations in one transaction: all of them or none."""
    if from_version >= SCHEMA_VERSION:
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
        # Re-read inside the write lock: another process may have migrated meanwhile.
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        current = 0
        if has_meta:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            current = int(row[0]) if row else 0
        for script in MIGRATIONS[current:]:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('app', ?)", (APP_ID,))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if _is_locked(exc):
            raise StoreError(f"{path}: locked by another process") from None
        raise


def _statements(script: str) -> list[str]:
    lines = [ln.split("--", 1)[0] for ln in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
