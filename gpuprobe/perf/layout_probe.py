"""One layout of the reference server under test: start it, calibrate it, replay a workload.

    with LayoutProbe(opts, "intra", tmpdir, vocab, say) as probe:
        probe.calibrate()            # engine curves from the server's step records
        probe.replay(workload_df)    # client-side records of the real run

The server writes its step and request records to a store in `tmpdir`; calibration steps are
told apart from the replay's by their time window.
"""
from __future__ import annotations

import os
import time

import pandas as pd

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.perf.sim_layouts import LayoutConfig

FLUSH_WAIT_S = 1.5  # the server's telemetry thread writes every 0.5 s


class LayoutProbe:
    def __init__(self, opts, layout: str, tmpdir: str, vocab: int, say=lambda m: None):
        self.opts, self.layout, self.vocab, self.say = opts, layout, vocab, say
        self.db = os.path.join(tmpdir, f"{layout}.db")
        self.log = os.path.join(tmpdir, f"{layout}.log")
        self.handle = None
        self.part: dict = {}
        self.overhead_s = 0.0
        self.kv_bytes_per_token = 0
        self.num_blocks: dict[str, int] = {}
        self.records = pd.DataFrame()

    def __enter__(self) -> "LayoutProbe":
        from gpuprobe.server.launch import start_server

        extra = dict(self.opts.server_opts)
        if self.layout != "monolithic":
            extra.setdefault("prefill_share", self.opts.prefill_share)
        self.handle = start_server(self.opts.model, self.layout, store=self.db,
                                   log_path=self.log, **extra)
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.stop()
            self.handle = None

    def calibrate(self) -> None:
        from gpuprobe.perf.calibrate import run_calibration
        from gpuprobe.perf.profile import front_overhead_s, from_steps, worker_key
        from gpuprobe.store import Store

        cal = run_calibration(self.handle.url, vocab=self.vocab, progress=self.say,
                              **dict(self.opts.calibration))
        time.sleep(FLUSH_WAIT_S)
        with Store.open(self.db, read_only=True) as store:
            steps = store.steps(since_s=cal["t0_s"])
            reqs = store.requests(source="server", since_s=cal["t0_s"])
        steps = steps[steps["start_s"] <= cal["t1_s"]]
        if steps.empty:
            from gpuprobe.errors import GpuprobeError
            raise GpuprobeError(f"{self.layout}: the server wrote no step records (log: {self.log})")
        self.part = from_steps(steps, reqs)
        first_role = "mixed" if self.layout == "monolithic" else "prefill"
        self.overhead_s = front_overhead_s(cal, steps[steps["role"] == first_role])
        for role, grp in steps.groupby("role"):
            self.num_blocks[worker_key(self.layout, role)] = int(grp["kv_blocks_total"].max())
        kv = reqs.dropna(subset=["kv_handoff_bytes"]) if "kv_handoff_bytes" in reqs else reqs.iloc[:0]
        if len(kv):
            self.kv_bytes_per_token = int((kv["kv_handoff_bytes"] / kv["prompt_tokens"]).median())
        self.say(f"{self.layout}: calibrated ({len(steps)} steps); front end {self.overhead_s * 1e3:.1f} ms")

    def replay(self, workload: pd.DataFrame) -> None:
        from gpuprobe.errors import GpuprobeError
        from gpuprobe.workloads.replay import replay

        self.say(f"{self.layout}: replaying {len(workload)} requests over "
                 f"{workload['arrival_s'].iloc[-1]:.1f} s")
        res = replay(workload, self.handle.url, vocab=self.vocab, request_timeout_s=120.0)
        bad = res.records[res.records["status"] != "ok"] if len(res.records) else res.records
        if len(res.records) == 0 or len(bad) > 0.05 * len(res.records):
            first = bad.iloc[0]["error"] if len(bad) else "no records"
            raise GpuprobeError(f"{self.layout}: {len(bad)} of {len(res.records)} replayed requests "
                                f"failed (first: {first})")
        self.records = res.records

    def scheduler_config(self, role: str) -> SchedulerConfig:
        """The scheduler this server's `role` worker ran (gpuprobe serve's defaults)."""
        from gpuprobe.perf.profile import worker_key

        blocks = self.num_blocks.get(worker_key(self.layout, role), 1024)
        o = dict(self.opts.server_opts)
        return SchedulerConfig(max_num_seqs=int(o.get("max_num_seqs", 64)),
                               max_num_batched_tokens=2048,
                               chunked_prefill_tokens=o.get("chunked_prefill_tokens"),
                               num_blocks=blocks, block_size=16, role=role)


def scheduler_configs(probes: dict) -> LayoutConfig:
    kw = {}
    if "monolithic" in probes:
        kw["mixed"] = probes["monolithic"].scheduler_config("mixed")
    split = probes.get("intra") or probes.get("cross")
    if split is not None:
        kw["prefill"] = split.scheduler_config("prefill")
        kw["decode"] = split.scheduler_config("decode")
    return LayoutConfig(**kw)
