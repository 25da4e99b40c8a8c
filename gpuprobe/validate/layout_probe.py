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

import numpy as np
import pandas as pd

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.sim.layouts import LayoutConfig

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
        # monotonic (start, end) of each kept replay (and, in cal_runs, of each calibration
        # pass), so the speed probe's readings can be matched to them (speed_probe.py)
        self.replay_windows: list[tuple[float, float]] = []
        self.recheck_window: tuple[float, float] | None = None
        self.recheck_ratio: dict[str, float | None] = {}  # worker -> steps now / at calibration
        self.cal_steps = pd.DataFrame()      # the calibration's step records
        self.cal_requests = pd.DataFrame()   # ... and the server's request rows
        self.recheck_steps = pd.DataFrame()  # the recheck's
        # per calibration pass: window, steps, requests, front CPU points, front overhead
        self.cal_runs: list[dict] = []

    @property
    def calibrate_windows(self) -> list[tuple[float, float]]:
        """Monotonic (start, end) of each kept calibration pass."""
        return [r["window"] for r in self.cal_runs]

    def __enter__(self) -> "LayoutProbe":
        from gpuprobe.server.launch import start_server

        extra = dict(self.opts.server_opts)
        extra.setdefault("device", getattr(self.opts, "device", "cpu"))
        # calibration's decode bursts (up to 64 at once) are the load it means to send: the
        # server's 429 for a predicted wait over 10 s would fail them on a busy machine
        extra.setdefault("max_queue_wait", "0")
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
        self.foreign_cores["calibrate"] = self._pass(guard, f"{self.layout} calibration")

    def _pass(self, guard, phase: str) -> float | None:
        """A calibration pass under `guard`; of a repeated (disturbed) pass only the rerun is
        kept."""
        n0 = len(self.cal_runs)
        load = guard(phase, self._calibrate)
        if len(self.cal_runs) > n0 + 1:
            del self.cal_runs[n0:-1]
            self._fit()
        return load

    def _calibrate(self) -> None:
        """One calibration pass; the profile is fitted on every pass so far (_fit)."""
        from gpuprobe.workloads.calibrate import run_calibration
        from gpuprobe.perf.profile import first_token_role, front_overhead_s
        from gpuprobe.perf.wake import wake_samples

        marks = [self._cpu_mark("start")]
        t_start = time.monotonic()

        def note(msg: str) -> None:
            marks.append(self._cpu_mark(msg))
            self.say(msg)
        cal = run_calibration(self.handle.url, vocab=self.vocab, progress=note,
                              **dict(self.opts.calibration))
        marks.append(self._cpu_mark("end"))
        window = (t_start, time.monotonic())
        phases = _phase_cpu(cal, marks)
        steps, reqs, probes = self._records(cal)
        if steps.empty:
            from gpuprobe.errors import GpuprobeError
            raise GpuprobeError(f"{self.layout}: the server wrote no step records (log: {self.log})")
        first_role = first_token_role(self.layout)
        self.cal_runs.append({"window": window, "steps": steps, "requests": reqs,
                              "probe_requests": probes,
                              "front_points": _front_points(phases, _prefill_reps(marks)),
                              "phase_cpu": phases, "wake": wake_samples(cal),
                              "overhead_s": front_overhead_s(cal, steps[steps["role"] == first_role])})
        self._fit()
        n = len(self.cal_runs)
        self.say(f"{self.layout}: calibrated ({len(steps)} steps{f', pass {n}' if n > 1 else ''}); "
                 f"front end {self.overhead_s * 1e3:.1f} ms")

    def _fit(self) -> None:
        """The profile part, front overhead and front CPU from all calibration passes pooled:
        one pass is about 12 s of this machine's speed, which moves 10-30% between passes a
        minute apart (docs/model-log.md), so passes spread over the replays stand for the
        speed the replays ran at better than the first pass alone."""
        from gpuprobe.perf.contention import fit_front_cpu, prompt_token_cpu
        from gpuprobe.perf.profile import from_steps, worker_key

        runs = self.cal_runs
        steps = pd.concat([r["steps"] for r in runs], ignore_index=True)
        reqs = pd.concat([r["requests"] for r in runs], ignore_index=True)
        handoffs = pd.concat([reqs] + [r["probe_requests"] for r in runs], ignore_index=True)
        self.part = from_steps(steps, reqs, link_requests=handoffs)
        self._fit_wake()
        self.cal_steps, self.cal_requests = steps, reqs
        points = [p for r in runs for p in r["front_points"]]
        per_prompt = prompt_token_cpu([p for r in runs for p in r["phase_cpu"]])
        self.front_cpu = fit_front_cpu(points, per_prompt) if points else _no_front_cpu()
        self.overhead_s = float(np.median([r["overhead_s"] for r in runs]))
        for role, grp in steps.groupby("role"):
            self.num_blocks[worker_key(self.layout, role)] = int(grp["kv_blocks_total"].max())
        kv = reqs.dropna(subset=["kv_handoff_bytes"]) if "kv_handoff_bytes" in reqs else reqs.iloc[:0]
        if len(kv):
            self.kv_bytes_per_token = int((kv["kv_handoff_bytes"] / kv["prompt_tokens"]).median())

    def _fit_wake(self) -> None:
        """The idle probes of every pass, pooled, as the wake-up of the worker that makes the
        first tokens (the monolithic or the prefill worker): how much longer the probes' own
        prefill steps took than the same sizes back to back (_wake_of)."""
        from dataclasses import replace

        from gpuprobe.perf.profile import first_token_role, worker_key
        from gpuprobe.perf.wake import wake_fields

        key = worker_key(self.layout, first_token_role(self.layout))
        fields = wake_fields([s for r in self.cal_runs for s in _wake_of(r)])
        if key in self.part["workers"] and fields["wake"]:
            self.part["workers"][key] = replace(self.part["workers"][key], **fields)

    def recalibrate(self, guard=None) -> None:
        """Another calibration pass, pooled with the ones before (_fit); after it, the first
        pass's shapes give the recheck ratio (recheck.py) without a separate recheck."""
        from gpuprobe.perf.profile import worker_key
        from gpuprobe.validate.recheck import same_shape_ratio

        guard = guard or (lambda phase, fn: fn())
        n = len(self.cal_runs) + 1
        self.foreign_cores[f"calibrate {n}"] = self._pass(guard, f"{self.layout} calibration {n}")
        first, last = self.cal_runs[0]["steps"], self.cal_runs[-1]["steps"]
        self.recheck_ratio = {worker_key(self.layout, role): same_shape_ratio(grp, first[first["role"] == role])
                              for role, grp in last.groupby("role")}

    def recalibrate_if_time(self, guard, last: bool) -> None:
        """A pass after a replay; one between two replays is skipped when the time budget
        has no room for it (the passes so far stay pooled), the one after a layout's last
        replay always runs (it closes the bracket around the replays)."""
        if last or guard.spare_s() >= 0:
            self.recalibrate(guard)
            return
        guard.skip()
        self.say(f"{self.layout}: calibration pass skipped (the time budget has no room for it)")

    def recheck(self, guard=None) -> None:
        """A short second calibration after the replays (recheck.py). Only a check: where the
        budget is spent, it is skipped and the replays measured are still reported."""
        from gpuprobe.validate.cpu_watch import BudgetSpent
        guard = guard or (lambda phase, fn: fn())
        try:
            self.foreign_cores["recheck"] = guard(f"{self.layout} recheck", self._recheck)
        except BudgetSpent:
            self.say(f"{self.layout}: recheck skipped (the time budget is spent)")

    def _recheck(self) -> None:
        from gpuprobe.workloads.calibrate import run_calibration
        from gpuprobe.perf.profile import worker_key
        from gpuprobe.validate.recheck import RECHECK, same_shape_ratio

        t_start = time.monotonic()
        cal = run_calibration(self.handle.url, vocab=self.vocab, **RECHECK)
        self.recheck_window = (t_start, time.monotonic())
        steps, _, _ = self._records(cal)
        self.recheck_steps, self.recheck_ratio = steps, {}
        for role, grp in steps.groupby("role"):
            before = self.cal_steps[self.cal_steps["role"] == role]
            self.recheck_ratio[worker_key(self.layout, role)] = same_shape_ratio(grp, before)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in self.recheck_ratio.items() if v is not None)
        self.say(f"{self.layout}: recheck, step time / calibration's, same shapes: {shown or '-'}")

    def _records(self, cal: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """(steps, server requests, idle probes' server requests) the server stored during
        calibration run `cal`. The probes come after t1_s: their slow, lone steps are no part
        of the step fits, their lone handoffs are what the link is fitted on."""
        from gpuprobe.store import Store

        time.sleep(FLUSH_WAIT_S)
        with Store.open(self.db, read_only=True) as store:
            steps = store.steps(since_s=cal["t0_s"])
            reqs = store.requests(source="server", since_s=cal["t0_s"])
        late = reqs["arrival_s"] > cal["t1_s"] if "arrival_s" in reqs else np.zeros(len(reqs), bool)
        return steps[steps["start_s"] <= cal["t1_s"]], reqs[~late], reqs[late]

    def _cpu_mark(self, label: str) -> tuple[str, float | None]:
        """(label, CPU s of the front process + this client process so far)."""
        from gpuprobe.validate.cpu_watch import process_cpu_s

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
        known = [x for x in loads + [self.foreign_cores.get("replay")] if x is not None]
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


def _wake_of(run: dict) -> list[tuple[float, float]]:
    """One pass's wake-up samples: the idle probes' extra prefill-step time from the server's
    rows (wake.step_wake_samples), or, where those do not pair with the probes, the client's
    TTFT excess the pass kept (run['wake'])."""
    from gpuprobe.perf.wake import step_wake_samples

    client = list(run.get("wake", ()))
    probes = run.get("probe_requests")
    if probes is None or not client:
        return client
    return step_wake_samples([g for g, _ in client], run["requests"], probes) or client


def _no_front_cpu():
    from gpuprobe.perf.contention import FrontCpu
    return FrontCpu()


def _prefill_reps(marks: list[tuple[str, float | None]]) -> int:
    return max(1, sum(m.startswith("prefill sweep") for m, _ in marks))


def _phase_cpu(cal: dict, marks: list[tuple[str, float | None]]) -> list[tuple[int, int, int, float]]:
    """[(requests, prompt tokens, output tokens, front + client CPU s)] per calibration
    sub-phase (each prefill repetition, each decode prompt length), in order; [] without CPU
    readings. The first holds the warm-up request (64 tokens, 4 out)."""
    if any(c is None for _, c in marks):
        return []
    groups, reps = [], _prefill_reps(marks)
    pre = cal["prefill"]
    per = len(pre) // reps
    for i in range(reps):
        groups.append(pre[i * per:(i + 1) * per])
    for L in dict.fromkeys(L for _, L, _ in cal["decode"]):
        groups.append([r for _, LL, recs in cal["decode"] if LL == L for r in recs])
    # Each interval's CPU, by the mark that ends it; the idle probes' own is no sub-phase.
    cpu = [b - a for (_, a), (label, b) in zip(marks, marks[1:]) if label != "idle probes"]
    if len(cpu) == len(groups) + 1:  # the tail after the last note, into the last phase
        cpu = cpu[:-2] + [cpu[-2] + cpu[-1]]
    if len(cpu) != len(groups):
        return []
    out = []
    for i, (g, c) in enumerate(zip(groups, cpu)):
        warm = i == 0
        out.append((len(g) + warm, sum(r["prompt_tokens"] for r in g) + 64 * warm,
                    sum(len(r["token_times"]) for r in g) + 4 * warm, float(c)))
    return out


def _front_points(phases: list[tuple[int, int, int, float]], reps: int
                  ) -> list[tuple[float, float, float, float]]:
    """[(requests, prompt tokens, output tokens, front + client CPU s)] for the prefill sweep
    (the first `reps` sub-phases of _phase_cpu) and the decode sweep of one pass;
    contention.fit_front_cpu solves them for per request and per output token."""
    if not phases or reps >= len(phases):
        return []
    return [tuple(float(sum(p[i] for p in part)) for i in range(4))
            for part in (phases[:reps], phases[reps:])]
