"""A running layout: its workers, readiness and shutdown (front side).

Workers the front spawns (monolithic, intra, the local cross) talk over pipes, read on the
event loop with add_reader and handed to `on_message(instance, worker, msg)`; a closed pipe
(the process died) becomes `on_message(instance, worker, ("died", reason))`. A remote layout's
workers (RemoteSpec: started by `gpuprobe worker`, maybe on other hosts) are reached over the
link (remote_handle.py); one that is lost is re-probed until it answers again, then
("rejoined",) is reported.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field, replace

from gpuprobe.server import kv_ring
from gpuprobe.server.options import LayoutConfig
from gpuprobe.server.remote_handle import RemoteWorkerHandle
from gpuprobe.server.worker import WorkerSpec, worker_main

log = logging.getLogger("gpuprobe.server")
START_TIMEOUT_S = 180.0
REPROBE_S = (0.2, 0.5, 1.0, 2.0)  # waits between tries to reach a lost remote worker
_CTX = mp.get_context("spawn")


@dataclass
class WorkerHandle:
    """A worker process the front spawned, and its pipe."""

    spec: WorkerSpec
    proc: object
    conn: object
    info: dict = field(default_factory=dict)
    ready: asyncio.Future | None = None
    alive: bool = True

    @property
    def worker_id(self) -> str:
        return self.spec.worker_id

    @property
    def pid(self) -> int:
        return self.proc.pid

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

    def __init__(self, cfg: LayoutConfig, specs: list, on_message, remote=None):
        """remote: (LinkConfig, model name, the front's max context) for RemoteSpecs."""
        self.cfg = cfg
        self.specs = specs
        self.on_message = on_message
        self.workers: dict[str, WorkerHandle | RemoteWorkerHandle] = {}
        self.draining = False
        self.stopped = False
        self.started_s = time.time()
        self._ring_path: str | None = None
        self.remote = remote
        self._probes: set[asyncio.Task] = set()

    @property
    def name(self) -> str:
        return self.cfg.layout

    @property
    def is_split(self) -> bool:
        """Cross: each request's decode worker is chosen when it is dispatched."""
        return self.cfg.layout == "cross"

    def entries(self) -> list:
        """The workers new requests may go to (mixed or prefill), alive or not."""
        return [w for w in self.workers.values() if w.spec.role in ("mixed", "prefill")]

    def in_rotation(self, role: str) -> list:
        return [w for w in self.workers.values() if w.spec.role == role and w.alive]

    def decode_addr(self, w) -> str:
        """Where prefill workers send a request's KV for decode worker w."""
        return w.spec.addr if self.remote else w.info["handoff_addr"]

    async def start(self) -> None:
        """Spawn every worker (or reach every remote one) and wait until they are ready.
        Raises on failure; a remote layout starts when at least one worker of each role
        answers, and re-probes the others."""
        if self.remote:
            await self._start_remote()
            return
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

    # ---- remote workers ------------------------------------------------------------------
    async def _start_remote(self) -> None:
        for spec in self.specs:
            w = RemoteWorkerHandle(spec, self.remote[0], self.on_message)
            w.instance = self
            self.workers[spec.worker_id] = w
        handles = list(self.workers.values())
        results = await asyncio.gather(*(w.connect(*self.remote[1:]) for w in handles),
                                       return_exceptions=True)
        failed = [str(r) for r in results if isinstance(r, BaseException)]
        missing = [r for r in ("prefill", "decode") if not self.in_rotation(r)]
        if missing:
            await self.stop()
            raise RuntimeError(f"no {' and no '.join(missing)} worker answered: "
                               + "; ".join(failed))
        for w, r in zip(handles, results):
            if isinstance(r, BaseException):
                log.warning("%s; re-probing it", r)
                self.reprobe(w)

    def reprobe(self, w: RemoteWorkerHandle) -> None:
        """Try to reach a lost remote worker again, backing off, until it answers or the
        layout stops; then report ("rejoined",)."""
        task = asyncio.get_running_loop().create_task(self._reprobe(w))
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _reprobe(self, w: RemoteWorkerHandle) -> None:
        for n in itertools.count():
            await asyncio.sleep(REPROBE_S[min(n, len(REPROBE_S) - 1)])
            if self.stopped:
                return
            try:
                await w.connect(*self.remote[1:])
            except RuntimeError as exc:
                if n == len(REPROBE_S):  # once, not every try
                    log.warning("%s; still re-probing", exc)
                continue
            if self.stopped:
                await w.close()
                return
            self.on_message(self, w, ("rejoined",))
            return

    def pids(self) -> dict[str, int]:
        return {w.worker_id: w.pid for w in self.workers.values() if w.alive}

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask every worker to stop (aborting what it still holds); kill those that linger.
        Remote workers are only told this front is done with them: they run on."""
        self.stopped = True
        if self.remote:
            for task in list(self._probes):
                task.cancel()
            for w in self.workers.values():
                await w.close()
            return
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
