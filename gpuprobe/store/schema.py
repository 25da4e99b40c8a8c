"""The store's schema as forward migrations.

MIGRATIONS[i] takes a database from schema version i to i + 1. Never edit a migration that has
shipped: add a new one. Column names carry their units (`_s` seconds since the Unix epoch for
absolute times, `_s` durations otherwise, `_tokens`, `_bytes`, `_pct`).
"""

APP_ID = "gpuprobe"

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

-- One row per time series; samples refer to it so that a sample row is three numbers.
CREATE TABLE series (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL, source TEXT NOT NULL, device TEXT NOT NULL, metric TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '',
    UNIQUE (host, source, device, metric, labels)
);
CREATE TABLE samples (series_id INTEGER NOT NULL, ts_s REAL NOT NULL, value REAL);
CREATE INDEX samples_by_series_time ON samples (series_id, ts_s, value);

CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, kind TEXT NOT NULL, host TEXT NOT NULL DEFAULT '',
    started_s REAL NOT NULL, ended_s REAL, meta TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE requests (
    pk INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL DEFAULT '', source TEXT NOT NULL, request_id TEXT NOT NULL,
    host TEXT NOT NULL DEFAULT '', model TEXT, layout TEXT, workload TEXT,
    arrival_s REAL, prompt_tokens INTEGER, output_tokens INTEGER,
    queue_s REAL, prefill_start_s REAL, prefill_end_s REAL,
    kv_handoff_s REAL, kv_handoff_bytes INTEGER,
    first_token_s REAL, ttft_s REAL, tbt_p50_s REAL, tbt_p99_s REAL, tbt_max_s REAL,
    finish_s REAL, e2e_s REAL, status TEXT NOT NULL DEFAULT 'ok', error TEXT,
    token_times TEXT  -- JSON list: seconds from arrival of each output token
);
CREATE INDEX requests_by_run ON requests (run_id, arrival_s);
CREATE INDEX requests_by_time ON requests (arrival_s);

CREATE TABLE steps (
    pk INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT '', layout TEXT, role TEXT NOT NULL,
    worker TEXT, start_s REAL NOT NULL, duration_s REAL NOT NULL,
    num_prefill_seqs INTEGER, num_prefill_tokens INTEGER,
    num_decode_seqs INTEGER, num_decode_ctx_tokens INTEGER,
    kv_blocks_used INTEGER, kv_blocks_total INTEGER, num_preempted INTEGER
);
CREATE INDEX steps_by_run ON steps (run_id, start_s);

CREATE TABLE workloads (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_s REAL NOT NULL,
    source TEXT NOT NULL DEFAULT '', format TEXT NOT NULL DEFAULT '',
    num_requests INTEGER NOT NULL DEFAULT 0, meta TEXT NOT NULL DEFAULT '{}'
);
-- arrival_s is seconds from the workload's first request (its epoch start, if known, is in meta).
CREATE TABLE workload_requests (
    workload_id INTEGER NOT NULL, idx INTEGER NOT NULL,
    arrival_s REAL NOT NULL, prompt_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    model TEXT, log_type TEXT, session_id TEXT, hash_ids TEXT,
    PRIMARY KEY (workload_id, idx)
) WITHOUT ROWID;

CREATE TABLE layout_events (
    pk INTEGER PRIMARY KEY, ts_s REAL NOT NULL, host TEXT NOT NULL DEFAULT '', run_id TEXT,
    from_layout TEXT, to_layout TEXT NOT NULL, prefill_share REAL, actor TEXT, reason TEXT,
    status TEXT NOT NULL DEFAULT 'ok', detail TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE events (
    pk INTEGER PRIMARY KEY, ts_s REAL NOT NULL, host TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL, device TEXT NOT NULL DEFAULT '', kind TEXT NOT NULL, message TEXT
);
CREATE INDEX events_by_time ON events (ts_s);

CREATE TABLE forecasts (
    pk INTEGER PRIMARY KEY, created_s REAL NOT NULL, workload TEXT, model TEXT NOT NULL,
    target_s REAL NOT NULL, metric TEXT NOT NULL, value REAL, lo REAL, hi REAL
);

CREATE TABLE recommendations (
    pk INTEGER PRIMARY KEY, created_s REAL NOT NULL, host TEXT NOT NULL DEFAULT '',
    workload TEXT, layout TEXT NOT NULL, prefill_share REAL, confidence REAL,
    slo TEXT NOT NULL DEFAULT '{}', evidence TEXT NOT NULL DEFAULT '{}',
    applied_s REAL
);

CREATE TABLE profiles (
    pk INTEGER PRIMARY KEY, created_s REAL NOT NULL, name TEXT NOT NULL, target TEXT,
    body TEXT NOT NULL
);
"""

# Version 2: a 10-second rollup of every series (min, max, sum, count), kept up to date at
# insert time, so that plotting a day of 10 Hz samples reads 8,640 rows instead of 864,000;
# and how far retention has downsampled each series.
_V2 = """
CREATE TABLE samples_10s (
    series_id INTEGER NOT NULL, bucket_s REAL NOT NULL,
    value_min REAL, value_max REAL, value_sum REAL, num_samples INTEGER NOT NULL,
    PRIMARY KEY (series_id, bucket_s)
) WITHOUT ROWID;
CREATE TABLE series_rollup (series_id INTEGER PRIMARY KEY, until_s REAL NOT NULL);
"""

# Version 3: the CPU time a cross decode worker's receive thread spent on a request's KV
# (reading the socket, deserializing): it runs beside the decode loop on the same cores, so the
# performance model charges it to the decode worker. NULL for other layouts and older rows.
_V3 = """
ALTER TABLE requests ADD COLUMN kv_recv_cpu_s REAL;
"""

# Version 4: what a step's attention read, for the cost model. num_decode_padded_tokens: the
# KV positions of the decodes' attention when each row is padded to the longest context (the
# reference runner's one batched call; equal to num_decode_ctx_tokens for a paged kernel);
# prefill_q_tokens2: the prefill chunks' Q, sum of (start + n)^2 - start^2. Without it the
# fit can only take Q as T^2/k, exact for k equal prompts. NULL in older rows.
_V4 = """
ALTER TABLE steps ADD COLUMN num_decode_padded_tokens INTEGER;
ALTER TABLE steps ADD COLUMN prefill_q_tokens2 INTEGER;
"""

# Version 5: the decision half. recommendations gain what `recommend` decides on (params,
# candidates with their predicted metrics, reasons with evidence, a confidence word, the
# searched goodput, the margin over the runner-up, which profile; where it was applied);
# forecasts gain the forecast each row belongs to (forecast_id), its origin and bucket, and
# both interval levels (lo/hi stay as the 80% one for older readers); validations keep
# validate's results (for "the last validate error"); decisions is the autopilot's audit log
# (its outcome filled in after the next interval); locks hold one autopilot per target.
_V5 = """
ALTER TABLE recommendations ADD COLUMN params TEXT NOT NULL DEFAULT '{}';
ALTER TABLE recommendations ADD COLUMN candidates TEXT NOT NULL DEFAULT '[]';
ALTER TABLE recommendations ADD COLUMN reasons TEXT NOT NULL DEFAULT '[]';
ALTER TABLE recommendations ADD COLUMN confidence_label TEXT;
ALTER TABLE recommendations ADD COLUMN max_goodput_rps_per_device REAL;
ALTER TABLE recommendations ADD COLUMN margin REAL;
ALTER TABLE recommendations ADD COLUMN profile TEXT;
ALTER TABLE recommendations ADD COLUMN body TEXT NOT NULL DEFAULT '{}';
ALTER TABLE recommendations ADD COLUMN applied_target TEXT;

ALTER TABLE forecasts ADD COLUMN forecast_id TEXT;
ALTER TABLE forecasts ADD COLUMN as_of_s REAL;
ALTER TABLE forecasts ADD COLUMN bucket_s REAL;
ALTER TABLE forecasts ADD COLUMN horizon_s REAL;
ALTER TABLE forecasts ADD COLUMN lo80 REAL;
ALTER TABLE forecasts ADD COLUMN hi80 REAL;
ALTER TABLE forecasts ADD COLUMN lo95 REAL;
ALTER TABLE forecasts ADD COLUMN hi95 REAL;
ALTER TABLE forecasts ADD COLUMN note TEXT;
CREATE INDEX forecasts_by_id ON forecasts (forecast_id);

CREATE TABLE validations (
    pk INTEGER PRIMARY KEY, created_s REAL NOT NULL, host TEXT NOT NULL DEFAULT '',
    workload TEXT, model TEXT, device TEXT, profile TEXT,
    best_measured TEXT, best_predicted TEXT, bar_met INTEGER,
    body TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE decisions (
    pk INTEGER PRIMARY KEY, ts_s REAL NOT NULL, host TEXT NOT NULL DEFAULT '', target TEXT NOT NULL,
    window_start_s REAL, window_end_s REAL, current_layout TEXT, chosen_layout TEXT,
    params TEXT NOT NULL DEFAULT '{}', action TEXT NOT NULL, reason TEXT,
    forecast TEXT NOT NULL DEFAULT '{}', candidates TEXT NOT NULL DEFAULT '[]',
    predicted TEXT NOT NULL DEFAULT '{}', recommendation_id INTEGER,
    outcome TEXT, outcome_s REAL
);
CREATE INDEX decisions_by_target ON decisions (target, ts_s);

CREATE TABLE locks (
    name TEXT PRIMARY KEY, holder_host TEXT NOT NULL, holder_pid INTEGER NOT NULL,
    since_s REAL NOT NULL, heartbeat_s REAL NOT NULL
);
"""

# Version 6: a cross request's KV transfer as the decode worker's receive thread saw it, first
# byte to last (kv_handoff_s also holds the prefill worker's send and the decode worker's
# admission): what vllm:nixl_xfer_time_seconds exports. NULL for other layouts, older rows.
_V6 = """
ALTER TABLE requests ADD COLUMN kv_xfer_s REAL;
"""

# Version 7: the reference server's arrivals, one row per request when it arrives (admitted,
# or refused with the reason: context_length_exceeded, max_in_flight, ...), with what the
# server held then. `requests` gets a request's row only when it ends, so a backlog was
# invisible there until it cleared; here load shows as it comes. The `locks` table goes.
_V7 = """
CREATE TABLE arrivals (
    pk INTEGER PRIMARY KEY, run_id TEXT NOT NULL DEFAULT '', source TEXT NOT NULL,
    host TEXT NOT NULL DEFAULT '', request_id TEXT NOT NULL, arrival_s REAL NOT NULL,
    prompt_tokens INTEGER, max_tokens INTEGER, status TEXT NOT NULL, reason TEXT,
    num_in_flight INTEGER, num_waiting INTEGER
);
CREATE INDEX arrivals_by_time ON arrivals (arrival_s);
-- the autopilot's store lock made one controller per store, not per server: the server's
-- controller lease (/admin/lease) replaces it
DROP TABLE locks;
"""

ROLLUP_S = 10.0
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
SCHEMA_VERSION = len(MIGRATIONS)
