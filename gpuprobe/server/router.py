"""Routes requests to the active layout, turns worker messages into client events, switches
layouts live, and replaces layouts whose worker died. Runs on the front's event loop.

Live switch: start the new layout's workers and wait until they are ready; make it active
(new requests go there); ask the old entry worker to hand back requests it has not started
("drain" -> "requeue"), re-dispatch those to the new layout; let the old workers finish what
they hold, then stop them. No request is failed or lost by a switch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from gpuprobe.server import routing
from gpuprobe.server import telemetry as tm
from gpuprobe.server.admission import Admission
from gpuprobe.server.layout_instance import LayoutInstance
from gpuprobe.server.layouts import worker_specs
from gpuprobe.server.openai_api import ApiError
from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.request_state import Tracked

log = logging.getLogger("gpuprobe.server")


class Router:
    def __init__(self, opts: ServeOptions, metrics, telemetry, run_id: str, host: str,
                 max_context: int = 0):
        self.opts, self.metrics, self.telemetry = opts, metrics, telemetry
        self.max_context = max_context  # what the front admits; remote workers must hold it
        self.run_id, self.host = run_id, host
        self.active: LayoutInstance | None = None
        self.retired: list[LayoutInstance] = []
        self.requests: dict[str, Tracked] = {}
        self.backlog: list[Tracked] = []
        self.history: list[dict] = []
        self.closing = False
        self._lock = asyncio.Lock()
        self._tags = 0
        self._turn = 0  # the next worker in turn among equally loaded ones
        self._tasks: set[asyncio.Task] = set()
        self.admission = Admission(opts.max_num_seqs + opts.max_queue, opts.max_queue_wait_s)

    # ---- layouts -------------------------------------------------------------------------
    @property
    def switching(self) -> bool:
        """A switch (admin or replacement) holds the lock until its new layout is active."""
        return self._lock.locked()

    async def switch(self, cfg: LayoutConfig, actor: str = "admin", reason: str = "",
                     detail: dict | None = None) -> dict:
        """Make `cfg` the active layout; returns the history entry. Raises if it fails to start.
        detail: more for the layout event's detail (a forced change: whose lease it ended)."""
        async with self._lock:
            t0 = time.time()
            old = self.active
            self._tags += 1
            try:
                new = LayoutInstance(cfg, worker_specs(self.opts, cfg, f"L{self._tags}"),
                                     self._on_message, self._remote(cfg))
                await self._remote_free(cfg)
                await new.start()
                status, error = "ok", None
            except Exception as exc:  # noqa: BLE001 - any start failure is a failed switch
                status, error = "failed", str(exc).splitlines()[0]
            entry = self._record(t0, old.cfg if old else None, cfg, status, actor, reason, error,
                                 detail)
            if status != "ok":
                raise RuntimeError(f"layout {cfg.layout} failed to start: {error}")
            self.active = new
            self.metrics.set_layout(cfg.layout, self._share(cfg), ("monolithic", "intra", "cross"))
            if old is not None and old not in self.retired:
                self._retire(old)
            backlog, self.backlog = self.backlog, []
            for t in backlog:
                self._dispatch(t)
            return entry

    def _remote(self, cfg: LayoutConfig):
        return (self.opts.link, self.opts.model, self.max_context) if cfg.remote else None

    async def _remote_free(self, cfg: LayoutConfig, timeout_s: float = 120.0) -> None:
        """Remote workers serve one layout of one front at a time: a draining remote layout
        finishes what it holds before a new one takes the workers."""
        if not cfg.remote:
            return
        if self.active is not None and self.active.remote:
            raise RuntimeError("the front already runs on its remote workers")
        deadline = time.monotonic() + timeout_s
        while any(i.remote for i in self.retired):
            if time.monotonic() > deadline:
                raise RuntimeError("the remote workers are still finishing the last layout's "
                                   "requests")
            await asyncio.sleep(0.05)

    def _share(self, cfg: LayoutConfig) -> float | None:
        return None if cfg.layout == "monolithic" else cfg.prefill_share

    def _record(self, t0, old_cfg, cfg, status, actor, reason, error, detail=None) -> dict:
        entry = {"ts_s": t0, "from": old_cfg.layout if old_cfg else None, "to": cfg.layout,
                 "prefill_share": self._share(cfg),
                 "chunked_prefill_tokens": cfg.chunked_prefill_tokens,
                 "duration_s": round(time.time() - t0, 3), "status": status, "actor": actor}
        if error:
            entry["error"] = error
        self.history.append(entry)
        self.telemetry.add_layout_event({
            "ts_s": t0, "host": self.host, "run_id": self.run_id,
            "from_layout": entry["from"], "to_layout": cfg.layout,
            "prefill_share": entry["prefill_share"], "actor": actor, "reason": reason or None,
            "status": status, "detail": {"duration_s": entry["duration_s"], "error": error,
                                         "chunked_prefill_tokens": cfg.chunked_prefill_tokens,
                                         **(detail or {})}})
        log.info("layout %s -> %s: %s in %.2fs", entry["from"], cfg.layout, status,
                 entry["duration_s"])
        return entry

    def _retire(self, inst: LayoutInstance) -> None:
        inst.draining = True
        self.retired.append(inst)
        for w in inst.entries():
            w.send(("drain",))
        self._maybe_stop(inst)

    def _maybe_stop(self, inst: LayoutInstance) -> None:
        if not inst.draining or inst.stopped or inst is self.active:
            return
        if any(t.layout is inst for t in self.requests.values()):
            return
        inst.stopped = True
        self._spawn(self._stop_retired(inst))

    async def _stop_retired(self, inst: LayoutInstance) -> None:
        await inst.stop()
        if inst in self.retired:
            self.retired.remove(inst)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- requests ------------------------------------------------------------------------
    def submit(self, t: Tracked) -> None:
        """Admit and dispatch, or refuse (admission.py): ApiError 429 (with retry_after_s)
        when max_num_seqs + max_queue are in flight or the predicted wait for a first token
        is over max_queue_wait_s."""
        if self.closing:
            raise ApiError("server is shutting down", None, 503, "server_error")
        waiting = self.counts()[1]
        self.admission.check(len(self.requests), waiting)
        self._arrived(t.rid, t.arrival_s, len(t.req.prompt_token_ids), t.req.max_tokens,
                      "admitted", None, waiting)
        self.requests[t.wid] = t
        self._dispatch(t)

    def reject(self, rid: str, arrival_s: float, exc: ApiError,
               prompt_tokens: int | None = None, max_tokens: int | None = None) -> None:
        """Record a refused request (bad body, unknown model, overload) in the store, with
        status http_<code> as the tap records refusals, and count it on /metrics by reason."""
        status = f"http_{exc.status}"
        self.telemetry.add_request(tm.rejected_record(
            self.run_id, self.host, self.metrics.model_name, rid, arrival_s=arrival_s,
            prompt_tokens=prompt_tokens, finish_s=time.time(), status=status, error=str(exc)))
        self._arrived(rid, arrival_s, prompt_tokens, max_tokens, status, exc.reason,
                      self.counts()[1])
        self.metrics.on_rejected(status, exc.reason)

    def _arrived(self, rid, arrival_s, prompt_tokens, max_tokens, status, reason,
                 waiting) -> None:
        """An arrivals row now, so load shows before any request finishes."""
        self.telemetry.add_arrival(tm.arrival_record(
            self.run_id, self.host, rid, arrival_s=arrival_s, prompt_tokens=prompt_tokens,
            max_tokens=max_tokens, status=status, reason=reason,
            num_in_flight=len(self.requests), num_waiting=waiting))
        self.metrics.on_arrival()

    def _dispatch(self, t: Tracked) -> None:
        """To the least loaded entry worker (and, cross, decode worker) of the active layout;
        to the backlog while there is none (a layout starting or being replaced). A remote
        layout missing every worker of a role answers 503 at once: none may come back."""
        inst, entry, decode = self.active, None, None
        if inst is not None:
            self._turn += 1
            entry = routing.least_loaded(inst, ("mixed", "prefill"), self.requests.values(),
                                         self._turn)
            if inst.is_split:
                decode = routing.least_loaded(inst, ("decode",), self.requests.values(),
                                              self._turn)
        if entry is None or (inst.is_split and decode is None):
            t.layout = None
            if inst is not None and inst.remote:
                role = "prefill" if entry is None else "decode"
                self._finish(t, "error", http_status=503, error=f"no {role} worker reachable")
            else:
                self.backlog.append(t)
            return
        t.layout, t.layout_name, t.owner = inst, inst.name, entry.worker_id
        t.decode_id = decode.worker_id if decode else ""
        t.dispatch_s = t.dispatch_s or time.time()
        if not entry.send(("add", t.worker_request(inst.decode_addr(decode) if decode else None))):
            t.layout = None
            self.backlog.append(t)

    def abort(self, t: Tracked, status: str, reason: str | None = None) -> None:
        """End a request early (client gone, stop string): tell its worker, record it."""
        if t.done:
            return
        w = t.layout.workers.get(t.owner) if t.layout else None
        if w is not None:
            w.send(("abort", t.wid))
        if t in self.backlog:
            self.backlog.remove(t)
        self._finish(t, status, reason=reason)

    def _finish(self, t: Tracked, status: str, reason: str | None = None,
                http_status: int = 500, error: str | None = None) -> None:
        t.done, t.status, t.error = True, status, error
        self.requests.pop(t.wid, None)
        t.events.put_nowait(("done", reason) if error is None else ("error", http_status, error))
        finish_s = time.time()
        record = tm.request_record(
            self.run_id, self.host, self.metrics.model_name, t.layout_name, t.rid,
            arrival_s=t.arrival_s, prompt_tokens=len(t.req.prompt_token_ids),
            token_times_s=t.token_times_s, dispatch_s=t.dispatch_s,
            prefill_start_s=t.prefill_start_s, prefill_end_s=t.prefill_end_s,
            kv_handoff_s=t.kv_handoff_s, kv_handoff_bytes=t.kv_handoff_bytes,
            kv_recv_cpu_s=t.kv_recv_cpu_s, kv_xfer_s=t.kv_xfer_s, finish_s=finish_s,
            status=status, error=error)
        self.telemetry.add_request(record)
        self.metrics.on_finish(finish_s - t.arrival_s, status)
        if status in ("ok", "aborted"):
            self.metrics.on_request("abort" if status == "aborted" else reason or "length",
                                    record)
        if t.layout is not None:
            self._maybe_stop(t.layout)

    def counts(self) -> tuple[int, int]:
        """(running, waiting): requests with and without a first token."""
        running = sum(1 for t in self.requests.values() if t.token_times_s)
        return running, len(self.requests) - running

    # ---- worker messages ----------------------------------------------------------------
    def _on_message(self, inst: LayoutInstance, w, msg: tuple) -> None:
        kind = msg[0]
        if kind == "step":
            self._on_step(inst, w, *msg[1:])
        elif kind == "adopted":
            t = self.requests.get(msg[1])
            if t is None:
                w.send(("abort", msg[1]))
                return
            t.owner = w.worker_id
            t.kv_handoff_s, t.kv_handoff_bytes = msg[2]["kv_handoff_s"], msg[2]["kv_handoff_bytes"]
            t.kv_recv_cpu_s, t.kv_xfer_s = msg[2].get("kv_recv_cpu_s"), msg[2].get("kv_xfer_s")
            self.metrics.on_handoff(t.kv_handoff_s)
            if t.kv_xfer_s is not None:
                self.metrics.on_kv_transfer(t.kv_xfer_s, t.kv_handoff_bytes or 0)
        elif kind == "error":
            t = self.requests.get(msg[1])
            if t is not None:
                self._finish(t, "error", http_status=500, error=msg[2])
        elif kind == "requeue":
            for rid in msg[1]:
                t = self.requests.get(rid)
                if t is not None and t.layout is inst:
                    t.layout = None
                    self._dispatch(t)
            self._maybe_stop(inst)
        elif kind == "fatal":
            log.error("worker %s failed: %s", w.worker_id, msg[1].splitlines()[0])
        elif kind == "died":
            if inst.remote:
                self._on_remote_lost(inst, w, msg[1])
            else:
                self._on_died(inst, w, msg[1])
        elif kind == "rejoined":
            log.info("worker %s (%s) is back in rotation", w.worker_id, w.spec.addr)

    def _on_step(self, inst, w, events, record, timings) -> None:
        now = time.time()
        for rid, tm_ in timings.items():
            t = self.requests.get(rid)
            if t is not None:
                t.prefill_start_s = t.prefill_start_s or tm_.get("prefill_start_s")
                t.prefill_end_s = tm_.get("prefill_end_s", t.prefill_end_s)
        for rid, token_id, index, finished, reason in events:
            t = self.requests.get(rid)
            if t is None or t.layout is not inst:
                if not finished:
                    w.send(("abort", rid))  # nobody is listening any more
                continue
            # The first token comes from the prefill worker, the rest from the decode worker,
            # on other connections: a later one may arrive first, and waits for its turn.
            t.early[index] = (token_id, finished, reason)
            while not t.done and len(t.token_times_s) in t.early:
                self._token(t, *t.early.pop(len(t.token_times_s)), now)
        self.telemetry.add_step(tm.step_record(self.run_id, self.host, inst.name,
                                               w.worker_id, record))
        self.metrics.on_step(record["num_prefill_tokens"] + record["num_decode_seqs"])
        if w.spec.role != "prefill" and record["kv_blocks_total"]:
            self.metrics.set_kv_usage(record["kv_blocks_used"] / record["kv_blocks_total"])

    def _token(self, t: Tracked, token_id: int, finished: bool, reason, now: float) -> None:
        gap = now - t.token_times_s[-1] if t.token_times_s else None
        if not t.token_times_s:
            self.metrics.on_first_token(now - t.arrival_s, len(t.req.prompt_token_ids))
            self.admission.on_first_token(t.arrival_s, now)
        t.token_times_s.append(now)
        self.metrics.on_token(gap)
        t.events.put_nowait(("token", token_id, reason if finished else None))
        if finished:
            self._finish(t, "ok", reason=reason)

    def _on_died(self, inst: LayoutInstance, w, reason: str) -> None:
        """A worker the front started died: the layout is replaced (a fresh set of workers);
        its requests that streamed nothing wait for the replacement, the rest end with 503."""
        log.error("%s", reason)
        if inst is self.active and not self.closing:
            self.active = None  # first: what runs again waits for the replacement
            self._retire(inst)
            self._spawn(self._replace(inst.cfg))
        self._rerun_or_fail(inst, w, f"worker died: {reason}")

    def _on_remote_lost(self, inst: LayoutInstance, w, reason: str) -> None:
        """A remote worker left: out of rotation (re-probed until it answers), its requests
        that streamed nothing run again on the others, the rest end with 503."""
        log.error("%s: out of rotation", reason)
        self._rerun_or_fail(inst, w, f"worker lost: {reason}")
        if not inst.stopped:
            inst.reprobe(w)

    def _rerun_or_fail(self, inst: LayoutInstance, w, error: str) -> None:
        retry, fail = routing.after_loss(inst, w.worker_id, self.requests.values())
        for t in fail:
            self._finish(t, "error", http_status=503, error=error)
        for t in retry:
            owner = inst.workers.get(t.owner)
            if owner is not None and owner is not w:
                owner.send(("abort", t.wid))
            self.requests.pop(t.wid, None)
            t.attempt, t.layout, t.owner, t.decode_id = t.attempt + 1, None, "", ""
            self.requests[t.wid] = t
            self._dispatch(t)
        self._maybe_stop(inst)

    async def _replace(self, cfg: LayoutConfig) -> None:
        try:
            await self.switch(cfg, actor="router", reason="worker died")
        except RuntimeError as exc:
            log.error("replacement failed: %s", exc)
            for t in self.backlog:
                self._finish(t, "error", http_status=503, error=str(exc))
            self.backlog = []

    def worker_pids(self) -> list[dict]:
        """Each worker of the active and draining layouts; `requests`: those it holds or is to
        decode, `streaming`: of them, those that sent their client a token (a loss fails these)."""
        out = []
        for inst, state in [(self.active, "active")] + [(i, "draining") for i in self.retired]:
            if inst is None:
                continue
            held, streaming = Counter(), Counter()
            for t in self.requests.values():
                if t.layout is inst:
                    for wid in {t.owner, t.decode_id} - {""}:
                        held[wid] += 1
                        streaming[wid] += bool(t.token_times_s)
            for w in inst.workers.values():
                out.append({"worker": w.worker_id, "role": w.spec.role, "layout": inst.name,
                            "state": state, "pid": w.pid, "alive": w.alive,
                            "cores": list(w.spec.cores), "partition": w.info.get("partition"),
                            "addr": getattr(w.spec, "addr", None),
                            "requests": held[w.worker_id], "streaming": streaming[w.worker_id]})
        return out

    # ---- shutdown -----------------------------------------------------------------------
    async def shutdown(self, grace_s: float = 10.0) -> None:
        """Stop admitting, give in-flight requests grace_s to finish, abort the rest, stop."""
        self.closing = True
        deadline = time.monotonic() + grace_s
        while self.requests and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for t in list(self.requests.values()):
            self._finish(t, "aborted", http_status=503, error="server shutting down")
        for inst in [self.active, *self.retired]:
            if inst is not None:
                await inst.stop(timeout_s=5.0)
        self.active = None
