"""A running layout: its worker processes, their pipes, readiness and shutdown (front side).

Messages from workers are read on the event loop with add_reader on each pipe and handed to
`on_message(instance, worker, msg)`; a closed pipe (the process died) becomes
`on_message(instance, worker, ("died", reason))`.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field, replace

from gpuprobe.server import kv_ring
from gpuprobe.server.options import LayoutConfig
from gpuprobe.server.worker import WorkerSpec, worker_main

START_TIMEOUT_S = 180.0
_CTX = mp.get_context("spawn")


@dataclass
class WorkerHandle:
    spec: WorkerSpec
    proc: object
    conn: object
    info: dict = field(default_factory=dict)
    ready: asyncio.Future | None = None
    alive: bool = True

    @property
    def worker_id(self) -> str:
        return self.spec.worker_id

    def send(self, msg) -> bool:
        """False when the worker is gone (its death is reported through the reader)."""
        if not self.alive:
            return False
        try:
            self.conn.send(msg)
            return True
        except (OSError, ValueError):
            return False


class LayoutInstance:
    """Worker processes of one layout, started together and stopped together."""

    def __init__(self, cfg: LayoutConfig, specs: list[WorkerSpec], on_message):
        self.cfg = cfg
        self.specs = specs
        self.on_message = on_message
        self.workers: dict[str, WorkerHandle] = {}
        self.draining = False
        self.stopped = False
        self.started_s = time.time()
        self._ring_path: str | None = None

    @property
    def name(self) -> str:
        return self.cfg.layout

    @property
    def entry(self) -> WorkerHandle:
        """The worker new requests go to: the mixed or the prefill one."""
        return next(w for w in self.workers.values() if w.spec.role in ("mixed", "prefill"))

    def worker_by_role(self, role: str) -> WorkerHandle | None:
        return next((w for w in self.workers.values() if w.spec.role == role), None)

    async def start(self) -> None:
        """Spawn every worker and wait for all to load their model. Raises on failure."""
        loop = asyncio.get_running_loop()
        peers = self._peer_pipes()
        self._attach_ring()
        if any(spec.device == "cpu" for spec in self.specs):
            # The workers' OpenMP threads wait asleep, not spinning: on a host whose cores are
            # shared (the front, a load client, other work) a spinning team stalls at every
            # barrier for a descheduled thread. A decode step of smollm2-135m on 2 threads
            # under a load average of 12 took 2.1 s spinning, 0.22 s passive (1 thread: 0.23).
            # Read by libgomp when torch loads, so set before the spawn; the user's value wins.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        for spec in self.specs:
            front, child = _CTX.Pipe()
            proc = _CTX.Process(target=worker_main, args=(spec, child, peers.get(spec.role)),
                                name=f"gpuprobe-{spec.worker_id}", daemon=True)
            proc.start()
            child.close()  # so the front sees EOF when the worker dies
            w = WorkerHandle(spec, proc, front, ready=loop.create_future())
            self.workers[spec.worker_id] = w
            loop.add_reader(front.fileno(), self._readable, w)
        for p in peers.values():
            p.close()  # only the two workers hold the handoff pipe
        try:
            await asyncio.wait_for(asyncio.gather(*(w.ready for w in self.workers.values())),
                                   START_TIMEOUT_S)
        except BaseException:
            await self.stop(timeout_s=2.0)
            raise
        self._unlink_ring()  # both workers have it mapped; the memory lives while they do

    def _attach_ring(self) -> None:
        """Intra on the CPU (or GPUPROBE_INTRA_KV=host): the KV ring both workers map."""
        piped = [s for s in self.specs if s.handoff == "pipe"]
        host = os.environ.get("GPUPROBE_INTRA_KV", "device") == "host"
        if not piped or not (host or all(s.device == "cpu" for s in piped)):
            return
        made = kv_ring.create_file()
        if made is None:
            return  # no room in /dev/shm: torch's per-handoff shared memory, as before
        self._ring_path = made[0]
        self.specs = [replace(s, kv_ring=made) if s.handoff == "pipe" else s
                      for s in self.specs]

    def _unlink_ring(self) -> None:
        if self._ring_path:
            try:
                os.unlink(self._ring_path)
            except FileNotFoundError:
                pass
            self._ring_path = None

    def _peer_pipes(self) -> dict:
        if not any(s.handoff == "pipe" for s in self.specs):
            return {}
        r, w = _CTX.Pipe(duplex=False)
        return {"decode": r, "prefill": w}

    def _readable(self, w: WorkerHandle) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "ready":
                    w.info = msg[1]
                    if not w.ready.done():
                        w.ready.set_result(True)
                    continue
                if msg[0] == "fatal" and not w.ready.done():
                    w.ready.set_exception(RuntimeError(f"{w.worker_id}: {msg[1]}"))
                self.on_message(self, w, msg)
        except (EOFError, OSError):
            self._died(w)

    def _died(self, w: WorkerHandle) -> None:
        if not w.alive:
            return
        w.alive = False
        asyncio.get_running_loop().remove_reader(w.conn.fileno())
        w.proc.join(0.5)
        reason = f"worker {w.worker_id} (pid {w.proc.pid}) exited with code {w.proc.exitcode}"
        if not w.ready.done():
            w.ready.set_exception(RuntimeError(reason))
        if not self.stopped:
            self.on_message(self, w, ("died", reason))

    def pids(self) -> dict[str, int]:
        return {w.worker_id: w.proc.pid for w in self.workers.values() if w.alive}

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask every worker to stop (aborting what it still holds); kill those that linger."""
        self.stopped = True
        self._unlink_ring()
        for w in self.workers.values():
            w.send(("stop",))
        deadline = time.monotonic() + timeout_s
        for w in self.workers.values():
            while w.proc.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(2)
            if w.alive:
                w.alive = False
                try:
                    asyncio.get_running_loop().remove_reader(w.conn.fileno())
                except (ValueError, OSError):
                    pass
            w.conn.close()
