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
        self.records = pd.DataFrame()          # the last replay's client records
        self.replays: list[pd.DataFrame] = []  # every replay's, in order
        self.foreign_cores: dict[str, float | None] = {}  # phase -> other tenants' load
        self.front_cpu = None  # contention.FrontCpu, from calibration
        # monotonic (start, end) of the kept calibration and of each kept replay, so the
        # speed probe's readings can be matched to them (speed_probe.py)
        self.calibrate_window: tuple[float, float] | None = None
        self.replay_windows: list[tuple[float, float]] = []
        self.recheck_window: tuple[float, float] | None = None
        self.recheck_ratio: dict[str, float | None] = {}  # worker -> steps now / at calibration
        self.cal_steps = pd.DataFrame()      # the calibration's step records
        self.cal_requests = pd.DataFrame()   # ... and the server's request rows
        self.recheck_steps = pd.DataFrame()  # the recheck's

    def __enter__(self) -> "LayoutProbe":
        from gpuprobe.server.launch import start_server

        extra = dict(self.opts.server_opts)
        extra.setdefault("device", getattr(self.opts, "device", "cpu"))
        if self.layout != "monolithic":
            extra.setdefault("prefill_share", self.opts.prefill_share)
        self.handle = start_server(self.opts.model, self.layout, store=self.db,
                                   log_path=self.log, **extra)
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.stop()
            self.handle = None

    def calibrate(self, guard=None) -> None:
        """Calibrate; `guard(phase, fn)` may rerun fn when the machine was busy (see validate)."""
        guard = guard or (lambda phase, fn: fn())
        self.foreign_cores["calibrate"] = guard(f"{self.layout} calibration", self._calibrate)

    def _calibrate(self) -> None:
        from gpuprobe.perf.calibrate import run_calibration
        from gpuprobe.perf.profile import from_steps, front_overhead_s, worker_key

        marks = [self._cpu_mark("start")]
        t_start = time.monotonic()

        def note(msg: str) -> None:
            marks.append(self._cpu_mark(msg))
            self.say(msg)
        cal = run_calibration(self.handle.url, vocab=self.vocab, progress=note,
                              **dict(self.opts.calibration))
        marks.append(self._cpu_mark("end"))
        self.calibrate_window = (t_start, time.monotonic())
        self.front_cpu = _front_cpu(cal, marks)
        steps, reqs = self._records(cal)
        if steps.empty:
            from gpuprobe.errors import GpuprobeError
            raise GpuprobeError(f"{self.layout}: the server wrote no step records (log: {self.log})")
        self.part = from_steps(steps, reqs)
        self.cal_steps, self.cal_requests = steps, reqs
        first_role = "mixed" if self.layout == "monolithic" else "prefill"
        self.overhead_s = front_overhead_s(cal, steps[steps["role"] == first_role])
        for role, grp in steps.groupby("role"):
            self.num_blocks[worker_key(self.layout, role)] = int(grp["kv_blocks_total"].max())
        kv = reqs.dropna(subset=["kv_handoff_bytes"]) if "kv_handoff_bytes" in reqs else reqs.iloc[:0]
        if len(kv):
            self.kv_bytes_per_token = int((kv["kv_handoff_bytes"] / kv["prompt_tokens"]).median())
        self.say(f"{self.layout}: calibrated ({len(steps)} steps); front end {self.overhead_s * 1e3:.1f} ms")

    def recheck(self, guard=None) -> None:
        """A short second calibration after the replays (recheck.py)."""
        guard = guard or (lambda phase, fn: fn())
        self.foreign_cores["recheck"] = guard(f"{self.layout} recheck", self._recheck)

    def _recheck(self) -> None:
        from gpuprobe.perf.calibrate import run_calibration
        from gpuprobe.perf.profile import worker_key
        from gpuprobe.perf.recheck import RECHECK, same_shape_ratio

        t_start = time.monotonic()
        cal = run_calibration(self.handle.url, vocab=self.vocab, **RECHECK)
        self.recheck_window = (t_start, time.monotonic())
        steps, _ = self._records(cal)
        self.recheck_steps, self.recheck_ratio = steps, {}
        for role, grp in steps.groupby("role"):
            before = self.cal_steps[self.cal_steps["role"] == role]
            self.recheck_ratio[worker_key(self.layout, role)] = same_shape_ratio(grp, before)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in self.recheck_ratio.items() if v is not None)
        self.say(f"{self.layout}: recheck, step time / calibration's, same shapes: {shown or '-'}")

    def _records(self, cal: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(steps, server requests) the server stored during calibration run `cal`."""
        from gpuprobe.store import Store

        time.sleep(FLUSH_WAIT_S)
        with Store.open(self.db, read_only=True) as store:
            steps = store.steps(since_s=cal["t0_s"])
            reqs = store.requests(source="server", since_s=cal["t0_s"])
        return steps[steps["start_s"] <= cal["t1_s"]], reqs

    def _cpu_mark(self, label: str) -> tuple[str, float | None]:
        """(label, CPU s of the front process + this client process so far)."""
        from gpuprobe.perf.cpu_watch import process_cpu_s

        front = process_cpu_s(self.handle.proc.pid)
        t = os.times()
        return label, None if front is None else front + t.user + t.system

    def replay(self, workload: pd.DataFrame, guard=None, repeats: int = 1) -> None:
        """Replay `repeats` times (validate compares medians: one replay of a bursty trace
        near a worker's capacity is a noisy sample); foreign_cores keeps the worst."""
        guard = guard or (lambda phase, fn: fn())
        loads = []
        for i in range(repeats):
            n0 = len(self.replays)
            loads.append(guard(f"{self.layout} replay {i + 1}/{repeats}", lambda: self._replay(workload)))
            del self.replays[n0:-1], self.replay_windows[n0:-1]  # a repeated phase: keep the rerun
        known = [x for x in loads if x is not None]
        self.foreign_cores["replay"] = max(known) if known else None

    def _replay(self, workload: pd.DataFrame) -> None:
        from gpuprobe.errors import GpuprobeError
        from gpuprobe.workloads.replay import replay

        self.say(f"{self.layout}: replaying {len(workload)} requests over "
                 f"{workload['arrival_s'].iloc[-1]:.1f} s")
        t_start = time.monotonic()
        res = replay(workload, self.handle.url, vocab=self.vocab, request_timeout_s=120.0)
        window = (t_start, time.monotonic())
        bad = res.records[res.records["status"] != "ok"] if len(res.records) else res.records
        if len(res.records) == 0 or len(bad) > 0.05 * len(res.records):
            first = bad.iloc[0]["error"] if len(bad) else "no records"
            raise GpuprobeError(f"{self.layout}: {len(bad)} of {len(res.records)} replayed requests "
                                f"failed (first: {first})")
        self.records = res.records
        self.replays.append(res.records)
        self.replay_windows.append(window)

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


def _front_cpu(cal: dict, marks: list[tuple[str, float | None]]):
    """Front + client CPU per request and per token: prefill sweep vs decode sweep."""
    from gpuprobe.perf.contention import FrontCpu, fit_front_cpu

    split = max((i for i, (m, _) in enumerate(marks) if m.startswith("prefill sweep")), default=None)
    if split is None or any(c is None for _, c in marks):
        return FrontCpu()
    pre_tok = sum(len(r["token_times"]) for r in cal["prefill"])
    dec = [r for _, _, recs in cal["decode"] for r in recs]
    dec_tok = sum(len(r["token_times"]) for r in dec)
    return fit_front_cpu([(len(cal["prefill"]) + 1, pre_tok + 4, marks[split][1] - marks[0][1]),
                          (len(dec), dec_tok, marks[-1][1] - marks[split][1])])
