"""Two writer processes and a reader process on one store file: no lost rows, no corruption."""
import subprocess
import sys
import textwrap

from gpuprobe.store import Store

WRITER = textwrap.dedent("""
    import sys
    from gpuprobe.store import Sample, Store
    path, device = sys.argv[1], sys.argv[2]
    store = Store.open(path, busy_timeout_s=30)
    for batch in range(40):
        store.insert_samples([Sample(1e9 + batch * 100 + i * 0.1, "h", "nvml", device, "sm_util_pct", float(i))
                              for i in range(500)])
        store.insert_requests([{"source": "test", "request_id": f"{device}-{batch}", "arrival_s": float(batch)}])
    print("done")
""")

READER = textwrap.dedent("""
    import sys, time
    from gpuprobe.store import Store
    store = Store.open(sys.argv[1], read_only=True)
    seen = []
    deadline = time.time() + 60
    while time.time() < deadline:
        n = int(store.downsample("sm_util_pct", 1e9, 1e9 + 4000, 100)["num_samples"].sum()) if store.metrics() else 0
        seen.append(n)
        if n == 40000:
            break
        time.sleep(0.01)
    assert seen == sorted(seen), "a reader saw rows disappear"
    print(len(seen), seen[-1])
""")


def test_two_writers_and_a_reader(tmp_path):
    path = tmp_path / "shared.db"
    Store.open(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), dev], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for dev in ("gpu0", "gpu1")]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    for p in procs + [reader]:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert reader.returncode == 0
    with Store.open(path) as store:
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for dev in ("gpu0", "gpu1"):
            assert len(store.samples("sm_util_pct", device=dev)) == 20_000
        assert len(store.requests(source="test")) == 80
        ds = store.downsample("sm_util_pct", 1e9, 1e9 + 4000, 100)
        assert ds["num_samples"].sum() == 40_000  # the rollup saw every row from both writers



LOCK_PROBE = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("free")
    except OSError:
        print("held")
""")


def test_opening_the_store_again_keeps_the_locks_of_this_processs_readers(tmp_path):
    """Store.open reads the file's header through SQLite: closing a plain descriptor of the
    file drops every lock this process holds on it (POSIX), so a reader here (the dashboard's
    cached connection while Apply opens the store) lost its lock, and another process could
    checkpoint the WAL out from under it (the reader then missed rows written since)."""
    import sqlite3
    path = tmp_path / "s.db"
    Store.open(path).close()
    reader = sqlite3.connect(path)  # mid-statement: it holds a lock on the file
    reader.execute("SELECT key FROM meta").fetchone()

    def probe() -> str:
        return subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path)], capture_output=True,
                              text=True, timeout=60).stdout.strip()
    assert probe() == "held"
    Store.open(path).close()
    assert probe() == "held"
    reader.close()
