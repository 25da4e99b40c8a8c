"""The body of a worker process: load the model, then step the engine while messages arrive.

Runs only inside a worker (spawned) process; imports torch through the model package.
"""

from __future__ import annotations

import time

from gpuprobe.engine import (
    LLMEngine,
    SamplingParams,
    Scheduler,
    SchedulerConfig,
    Sequence,
)
from gpuprobe.engine.sequence import SeqStatus
from gpuprobe.server.handoff import make_handoff
from gpuprobe.server.runner_setup import build_runner
from gpuprobe.server.warmup import warm_up
from gpuprobe.server.worker import IDLE_WAIT_S, WorkerSpec, wait_inputs


def _params(req: dict) -> SamplingParams:
    return SamplingParams(temperature=req["temperature"], top_p=req["top_p"],
                          max_tokens=req["max_tokens"], ignore_eos=req["ignore_eos"],
                          seed=req["seed"], stop_token_ids=tuple(req.get("stop_token_ids", ())))


class WorkerLoop:
    def __init__(self, spec: WorkerSpec, conn, peer):
        self.spec, self.conn = spec, conn
        self.runner, info = build_runner(spec)
        config = SchedulerConfig(
            max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens,
            chunked_prefill_tokens=spec.chunked_prefill_tokens, num_blocks=info["num_blocks"],
            block_size=spec.block_size, eos_token_id=info["eos_token_id"], role=spec.role)
        info["warmup_s"] = warm_up(self.runner, config)
        self.engine = LLMEngine(Scheduler(config), self.runner, clock=time.time)
        self.limits = _limits(self.runner, info["num_blocks"], spec.block_size)
        self.handoff = make_handoff(spec, peer, spec.link, self.limits)
        self.link_server = self._listen()
        self.requests: dict[str, dict] = {}  # rid -> request dict, while this worker holds it
        self.pending: list = []  # decode role: (seq, kv, meta) not yet admitted
        self.draining = False
        self.stopping = False
        conn.send(("ready", {**info, "pid": _pid(), "role": spec.role,
                             "worker_id": spec.worker_id, "model": spec.model,
                             "max_context": self.limits.max_context,
                             "vocab_size": self.limits.vocab_size,
                             "handoff_addr": self.handoff.address if self.handoff else None}))

    def _listen(self):
        """A decode worker the front started for cross: its KV link, before it says ready
        (a remote worker's link serves its control connection too: remote_worker.py)."""
        if not (self.spec.handoff == "tcp" and self.spec.role == "decode"
                and self.spec.listen_addr):
            return None
        from gpuprobe.server.link_server import LinkCounters, LinkServer

        server = LinkServer(self.spec.listen_addr, self.spec.link, {"kv": self.handoff.serve},
                            LinkCounters()).start()
        self.handoff.address = server.address
        return server

    @property
    def scheduler(self) -> Scheduler:
        return self.engine.scheduler

    def run(self) -> None:
        while not (self.stopping and not self._busy()):
            busy = self._busy()
            waits = [self.conn] + ([self.handoff.waitable] if self.handoff else [])
            for obj in wait_inputs(waits, 0 if busy else IDLE_WAIT_S):
                if obj is self.conn:
                    self._drain_conn()
            if self.handoff and self.spec.role == "decode":
                self.pending += self.handoff.receive_ready()
                self._admit_pending()
            if self.engine.has_unfinished():
                self._step()
        if self.handoff:
            self.handoff.close()
        if self.link_server is not None:
            self.link_server.close()

    def _busy(self) -> bool:
        return self.engine.has_unfinished() or bool(self.pending)

    def _drain_conn(self) -> None:
        while self.conn.poll():
            msg = self.conn.recv()
            kind = msg[0]
            if kind == "add":
                self._add(msg[1])
            elif kind == "abort":
                self.scheduler.abort(msg[1])
                self.requests.pop(msg[1], None)
            elif kind == "drain":
                self._requeue_unstarted()
            elif kind == "stop":
                self.stopping = True
                self._abort_all()  # stop means abort what is left
            elif kind == "reset":
                self._abort_all()
                self.draining = False

    def _abort_all(self) -> None:
        for rid in list(self.requests):
            self.scheduler.abort(rid)
        for seq in list(self.scheduler.waiting) + list(self.scheduler.running):
            self.scheduler.abort(seq.seq_id)  # a queued add the front no longer waits for
        self.requests.clear()
        self.pending.clear()

    def _add(self, req: dict) -> None:
        seq = Sequence(req["rid"], list(req["prompt"]), _params(req), req["arrival_s"])
        try:
            self.engine.add_request(seq)
        except ValueError as exc:
            self.conn.send(("error", req["rid"], str(exc)))
            return
        self.requests[req["rid"]] = req

    def _requeue_unstarted(self) -> None:
        """Hand back requests that have not started prefill, so the new layout runs them."""
        self.draining = True
        unstarted = [s for s in self.scheduler.waiting
                     if s.num_computed_tokens == 0 and s.num_completion_tokens == 0]
        for seq in unstarted:
            self.scheduler.abort(seq.seq_id)
            self.requests.pop(seq.seq_id, None)
        self.conn.send(("requeue", [s.seq_id for s in unstarted]))

    def _step(self) -> None:
        # Waiting sequences with nothing computed yet: the ones this step may start.
        fresh = [s for s in self.scheduler.waiting
                 if s.num_computed_tokens == 0 and s.num_completion_tokens == 0]
        events, record = self.engine.step()
        if record is None:
            return
        started = [s.seq_id for s in fresh if s.status is not SeqStatus.WAITING]
        end_s = record.start_s + record.duration_s
        timings = {rid: {"prefill_start_s": record.start_s} for rid in started}
        out = []
        for e in events:
            out.append((e.seq_id, e.token_id, e.index, e.finished, e.finish_reason))
            if e.index == 0:
                timings.setdefault(e.seq_id, {})["prefill_end_s"] = end_s
            if e.finished:
                self.requests.pop(e.seq_id, None)
        self.conn.send(("step", out, record.__dict__, timings))
        if self.spec.role == "prefill":
            self._hand_over()

    def _hand_over(self) -> None:
        for seq in self.scheduler.pop_prefilled():
            req = self.requests.pop(seq.seq_id, None)
            t0 = time.time()
            try:
                kv = self.runner.export_kv(seq)
            finally:
                self.scheduler.release(seq)
            if req is None:  # aborted meanwhile
                continue
            meta = {**req, "first_token": seq.last_token_id, "handoff_start_s": t0}
            try:
                self.handoff.send(meta, kv)
            except Exception as exc:  # noqa: BLE001 - the decode worker is gone: this request fails
                to = meta.get("decode_id") or "the decode worker"
                self.conn.send(("error", seq.seq_id, f"KV handoff to {to} failed: {exc}"))

    def _admit_pending(self) -> None:
        still = []
        for meta, kv in self.pending:
            if self.stopping:
                continue
            seq = Sequence.from_prefilled(meta["rid"], list(meta["prompt"]), meta["first_token"],
                                          _params(meta), meta["arrival_s"])
            try:
                if seq.is_finished or not self.scheduler.add_prefilled(seq):
                    still.append((meta, kv))
                    continue
                self.runner.import_kv(seq, kv)
            except ValueError as exc:  # a KV this worker cannot hold: that request fails
                self.scheduler.abort(seq.seq_id)
                self.handoff.release(meta)
                self.conn.send(("error", meta["rid"], f"KV import failed: {exc}"))
                continue
            self.handoff.release(meta)
            done_s = time.time()
            self.requests[meta["rid"]] = meta
            self.conn.send(("adopted", meta["rid"], {
                "kv_handoff_s": done_s - meta["handoff_start_s"],
                "kv_handoff_bytes": meta.get("kv_bytes"),
                "kv_recv_cpu_s": meta.get("kv_recv_cpu_s"),
                "kv_xfer_s": meta.get("kv_xfer_s")}))
        self.pending = still


def _limits(runner, num_blocks: int, block_size: int):
    """What this worker's link accepts: its model's vocabulary, context and KV layout."""
    from gpuprobe.server.link_limits import limits_of

    dtype = runner.kv_cache.dtype
    return limits_of(runner.config, str(dtype).removeprefix("torch."),
                     runner.kv_cache.element_size(),
                     min(runner.config.max_seq_len, num_blocks * block_size))


def _pid() -> int:
    import os

    return os.getpid()
