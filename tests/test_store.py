"""The embedded store: schema, reads with units, downsampling, retention, bad files."""
import json
import sqlite3

import pandas as pd
import pytest

from gpuprobe.errors import StoreError
from gpuprobe.store import Sample, Store
from gpuprobe.store.schema import SCHEMA_VERSION


def _samples(metric, n, t0=1_700_000_000.0, dt=0.1, device="gpu0"):
    return [Sample(t0 + i * dt, "hostA", "nvml", device, metric, float(i % 100)) for i in range(n)]


def test_new_store_is_wal_and_current(tmp_path):
    path = tmp_path / "s.db"
    with Store.open(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_default_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROBE_STORE", str(tmp_path / "env.db"))
    with Store.open() as store:
        assert store.path == tmp_path / "env.db"
    assert (tmp_path / "env.db").exists()


def test_samples_roundtrip_with_units_in_columns(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.insert_samples(_samples("sm_util_pct", 50) + _samples("power_w", 50))
        df = store.samples("sm_util_pct")
        assert list(df.columns) == ["ts_s", "host", "source", "device", "metric", "labels", "value"]
        assert len(df) == 50 and df["value"].iloc[7] == 7.0
        wide = store.wide(["sm_util_pct", "power_w"])
        assert {"sm_util_pct", "power_w"} <= set(wide.columns) and len(wide) == 50


def test_none_value_means_no_value(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.insert_samples([Sample(1.0, "h", "nvml", "gpu0", "power_w", None),
                              Sample(2.0, "h", "nvml", "gpu0", "power_w", 10.0)])
        df = store.samples("power_w")
        assert df["value"].isna().sum() == 1
        ds = store.downsample("power_w", 0.0, 100.0, max_points=1)
        assert ds["value_mean"].iloc[0] == 10.0 and ds["num_samples"].iloc[0] == 1


@pytest.mark.parametrize("max_points,span_s", [(50, 100.0), (2000, 86_400.0)])
def test_downsample_bounds_points_and_keeps_extremes(tmp_path, max_points, span_s):
    t0 = 1_700_000_000.0
    n = int(span_s / 0.1) if span_s < 1000 else 200_000
    dt = span_s / n
    rows = _samples("sm_util_pct", n, t0, dt)
    rows.append(Sample(t0 + span_s / 2, "hostA", "nvml", "gpu0", "sm_util_pct", 1000.0))  # a spike
    with Store.open(tmp_path / "s.db") as store:
        store.insert_samples(rows)
        ds = store.downsample("sm_util_pct", t0, t0 + span_s, max_points=max_points)
        assert 0 < len(ds) <= max_points
        assert ds["num_samples"].sum() == len(rows)
        assert ds["value_max"].max() == 1000.0  # min/max survive, a mean alone would hide it
        assert ds["value_min"].min() == 0.0
        assert ds["ts_s"].is_monotonic_increasing


def test_downsample_per_device(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.insert_samples(_samples("sm_util_pct", 100, device="gpu0") + _samples("sm_util_pct", 100, device="gpu1"))
        ds = store.downsample("sm_util_pct", 1_700_000_000.0, 1_700_000_010.0, max_points=10)
        assert set(ds["device"]) == {"gpu0", "gpu1"}
        only = store.downsample("sm_util_pct", 1_700_000_000.0, 1_700_000_010.0, 10, device="gpu1")
        assert set(only["device"]) == {"gpu1"}


def test_retention_delete(tmp_path):
    now = 1_700_100_000.0
    with Store.open(tmp_path / "s.db") as store:
        store.insert_samples(_samples("sm_util_pct", 1000, t0=now - 1000, dt=1.0))
        removed = store.apply_retention(max_age_s=500, mode="delete", now_s=now)
        df = store.samples("sm_util_pct")
        assert removed == 500 and len(df) == 500 and df["ts_s"].min() >= now - 500


def test_retention_downsample_keeps_means_once(tmp_path):
    now = 1_700_100_000.0
    with Store.open(tmp_path / "s.db") as store:
        rows = [Sample(now - 1200 + i, "h", "nvml", "gpu0", "power_w", 100.0 + (i % 2) * 10) for i in range(1200)]
        store.insert_samples(rows)
        store.apply_retention(max_age_s=600, mode="downsample", resolution_s=60, now_s=now)
        old = store.samples("power_w", end_s=now - 600 - 1e-6)
        assert 9 <= len(old) <= 11 and (old["value"] == 105.0).all()
        before = len(store.samples("power_w"))
        store.apply_retention(max_age_s=600, mode="downsample", resolution_s=60, now_s=now)
        assert len(store.samples("power_w")) == before  # a second pass does not average averages


def test_requests_steps_and_decisions(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.start_run("r1", "serve", host="h")
        store.insert_requests([{"run_id": "r1", "source": "server", "request_id": "a", "arrival_s": 1.0,
                                "prompt_tokens": 10, "output_tokens": 5, "ttft_s": 0.2,
                                "token_times": [0.2, 0.3]}])
        store.insert_steps([{"run_id": "r1", "role": "mixed", "start_s": 1.0, "duration_s": 0.01,
                             "num_prefill_tokens": 10, "num_decode_seqs": 0}])
        store.insert_recommendations([{"created_s": 2.0, "layout": "intra", "prefill_share": 0.5,
                                       "evidence": {"p99_tbt_s": 0.06}}])
        req = store.requests(run_id="r1")
        assert req["ttft_s"].iloc[0] == 0.2 and json.loads(req["token_times"].iloc[0]) == [0.2, 0.3]
        assert store.steps(run_id="r1")["num_prefill_tokens"].iloc[0] == 10
        assert json.loads(store.recommendations()["evidence"].iloc[0]) == {"p99_tbt_s": 0.06}
        with pytest.raises(ValueError, match="ttft_ms"):
            store.insert_requests([{"source": "x", "request_id": "b", "ttft_ms": 3}])


def test_workload_all_or_nothing_and_replace(tmp_path):
    df = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 20], "output_tokens": [1, 2]})
    with Store.open(tmp_path / "s.db") as store:
        store.save_workload("w", df, fmt="csv")
        with pytest.raises(Exception):
            store.save_workload("w", df)
        with pytest.raises(RuntimeError):
            with store.workload_writer("half") as w:
                w.add([(0.0, 1, 1)])
                raise RuntimeError("import broke")
        assert list(store.workloads()["name"]) == ["w"]
        assert store._conn.execute("SELECT COUNT(*) FROM workload_requests").fetchone()[0] == 2
        store.save_workload("w", df.iloc[:1], replace=True)
        assert len(store.workload("w")) == 1


def test_not_a_gpuprobe_file_is_left_untouched(tmp_path):
    text = tmp_path / "notes.db"
    text.write_bytes(b"hello, not a database\n")
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    for path in (text, other):
        before = path.read_bytes()
        with pytest.raises(StoreError, match="not a gpuprobe store"):
            Store.open(path)
        assert path.read_bytes() == before
        assert not (tmp_path / (path.name + "-wal")).exists()


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "s.db"
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 5),))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer gpuprobe"):
        Store.open(path)
    assert path.read_bytes() == before


def test_migration_from_version_1(tmp_path):
    from gpuprobe.store.schema import MIGRATIONS
    from gpuprobe.store.connection import _statements
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for stmt in _statements(MIGRATIONS[0]):
        conn.execute(stmt)
    conn.execute("INSERT INTO meta VALUES ('app', 'gpuprobe'), ('schema_version', '1')")
    conn.execute("INSERT INTO series (host, source, device, metric) VALUES ('h', 'nvml', 'gpu0', 'power_w')")
    conn.execute("INSERT INTO samples VALUES (1, 5.0, 42.0)")
    conn.commit()
    conn.close()
    with Store.open(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert store.samples("power_w")["value"].tolist() == [42.0]  # old rows kept
        store.insert_samples([Sample(6.0, "h", "nvml", "gpu0", "power_w", 1.0)])  # new tables work


def test_locked_store_gives_clear_error(tmp_path):
    path = tmp_path / "s.db"
    Store.open(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with Store.open(path, busy_timeout_s=0.2) as store:
            with pytest.raises(StoreError, match="locked"):
                store.insert_samples(_samples("power_w", 3))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Store.open(path) as store:
        assert len(store.samples("power_w")) == 0


def _migrated(path, version: int, old_row_sql: str) -> Store:
    """A new store file at an older schema version holding one row (old_row_sql), then opened:
    migrated to the current version."""
    from gpuprobe.store.schema import MIGRATIONS
    from gpuprobe.store.connection import _statements
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:version]:
        for stmt in _statements(script):
            conn.execute(stmt)
    conn.execute("INSERT INTO meta VALUES ('app', 'gpuprobe'), ('schema_version', ?)", (str(version),))
    conn.execute(old_row_sql)
    conn.commit()
    conn.close()
    store = Store.open(path)
    assert store.schema_version() == SCHEMA_VERSION
    return store


def test_migration_from_version_2_adds_kv_recv_cpu_and_keeps_requests(tmp_path):
    with _migrated(tmp_path / "v2.db", 2, "INSERT INTO requests (source, request_id, arrival_s, prompt_tokens, "
                   "kv_handoff_bytes) VALUES ('server', 'old', 1.0, 12, 24576)") as store:
        store.insert_requests([{"source": "server", "request_id": "new", "arrival_s": 2.0,
                                "kv_handoff_bytes": 2048, "kv_recv_cpu_s": 0.0007}])
        reqs = store.requests().set_index("request_id")
        assert reqs.loc["old", "kv_handoff_bytes"] == 24576 and pd.isna(reqs.loc["old", "kv_recv_cpu_s"])
        assert reqs.loc["new", "kv_recv_cpu_s"] == pytest.approx(0.0007)


def test_migration_from_version_3_adds_step_attention_columns_and_keeps_steps(tmp_path):
    with _migrated(tmp_path / "v3.db", 3, "INSERT INTO steps (run_id, role, start_s, duration_s, num_decode_seqs, "
                   "num_decode_ctx_tokens) VALUES ('old', 'mixed', 1.0, 0.002, 2, 30)") as store:
        store.insert_steps([{"run_id": "new", "role": "mixed", "start_s": 2.0, "duration_s": 0.003,
                             "num_decode_seqs": 2, "num_decode_ctx_tokens": 30,
                             "num_decode_padded_tokens": 40, "prefill_q_tokens2": 0}])
        steps = store.steps().set_index("run_id")
        assert steps.loc["old", "num_decode_ctx_tokens"] == 30
        assert pd.isna(steps.loc["old", "num_decode_padded_tokens"])
        assert steps.loc["new", "num_decode_padded_tokens"] == 40
