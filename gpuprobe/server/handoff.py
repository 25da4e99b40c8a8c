"""Prefill -> decode KV handoff channels, seen from inside a worker process.

PipeHandoff (intra): on the CPU the prefill worker copies the KV into a shared-memory ring both
workers mapped at start (kv_ring) and the Pipe carries where it lies; the decode worker copies
it into its cache and releases the span. A KV the ring has no room for goes as torch's
multiprocessing reductions pass it: a handle to fresh shared memory. On CUDA the KV stays in
device memory: the prefill worker sends a CUDA IPC handle to a device copy, and the decode
worker copies it into its cache on the GPU (GPUPROBE_INTRA_KV=host sends it through the host
ring instead, for comparison).
TcpHandoff (cross): the KV is sent over an authenticated TCP link in chunks as raw bytes
(kv_transfer, link_auth), to the decode worker the front chose for the request; a receive
thread in the decode worker checks the header, reads it into one buffer, and records its CPU
and transfer time.
Both: send(meta, kv) on the prefill side; receive_ready() -> [(meta, kv)] on the decode side,
and release(meta) once the KV is in the decode worker's cache.
"""

from __future__ import annotations

import os
import queue
import time

import torch
import torch.multiprocessing  # registers the tensor reductions that Pipe.send uses

from gpuprobe.server import kv_transfer, link_auth
from gpuprobe.server.kv_ring import KvRing, RingRef

CONNECT_TIMEOUT_S = 5.0  # a decode worker that does not answer fails the request, not the loop
IPC_COLLECT_EVERY = 32  # intra on CUDA: hand-overs between frees of released IPC copies
IO_TIMEOUT_S = 60.0


def _map_tensors(obj, fn, kind=torch.Tensor):
    if isinstance(obj, kind):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(o, fn, kind) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn, kind) for k, v in obj.items()}
    return obj


def _tensors(obj) -> list:
    found = []
    _map_tensors(obj, found.append)
    return found


def kv_nbytes(kv) -> int:
    """Bytes held by the tensors in an export_kv result."""
    total = [0]
    _map_tensors(kv, lambda t: total.__setitem__(0, total[0] + t.numel() * t.element_size()))
    return total[0]


class PipeHandoff:
    def __init__(self, role: str, conn, ring: KvRing | None = None):
        self.role, self.conn, self.ring = role, conn, ring
        self.address = None
        self.waitable = conn
        self.on_device = os.environ.get("GPUPROBE_INTRA_KV", "device") != "host"
        self._sent = 0
        self.ring_misses = 0  # prefill: KVs the ring had no room for

    def _portable(self, t):
        t = t.detach()
        if t.is_cuda and self.on_device:
            return t.clone()  # a CUDA IPC handle travels; torch keeps the block until released
        return t.to("cpu").clone()

    def send(self, meta: dict, kv) -> None:
        if self._send_in_ring(meta, kv):
            return
        # A clone: export_kv may return views of the whole cache, and sharing a view would
        # move the entire cache storage into shared memory.
        kv = _map_tensors(kv, self._portable)
        self.conn.send(({**meta, "kv_bytes": kv_nbytes(kv)}, kv))
        self._sent += 1
        if self.on_device and self._sent % IPC_COLLECT_EVERY == 0 and torch.cuda.is_initialized():
            # Device copies the decode worker has released are freed here, not at the next
            # allocation failure.
            torch.cuda.ipc_collect()

    def _send_in_ring(self, meta: dict, kv) -> bool:
        tensors = _tensors(kv)
        if self.ring is None or any(t.is_cuda and self.on_device for t in tensors):
            return False
        sizes = [-(-t.numel() * t.element_size() // 64) * 64 for t in tensors]
        span = self.ring.alloc(sum(sizes))
        if span is None:
            self.ring_misses += 1
            return False
        start, end, offset = span
        places = iter(zip(tensors, sizes))

        def place(t):
            nonlocal offset
            _, size = next(places)
            n = t.numel() * t.element_size()
            if n:
                self.ring.view(offset, n).view(t.dtype).view(t.shape).copy_(t.detach())
            ref = RingRef(offset, n, str(t.dtype).removeprefix("torch."), tuple(t.shape))
            offset += size
            return ref

        refs = _map_tensors(kv, place)
        self.conn.send(({**meta, "kv_bytes": sum(t.numel() * t.element_size() for t in tensors),
                         "kv_ring_span": (start, end)}, refs))
        return True

    def receive_ready(self) -> list:
        out = []
        while self.conn.poll():
            meta, kv = self.conn.recv()
            if "kv_ring_span" in meta:
                kv = _map_tensors(kv, self._ring_tensor, RingRef)
            out.append((meta, kv))
        return out

    def _ring_tensor(self, ref: RingRef):
        dtype = getattr(torch, ref.dtype)
        if not ref.nbytes:
            return torch.empty(ref.shape, dtype=dtype)
        return self.ring.view(ref.offset, ref.nbytes).view(dtype).view(ref.shape)

    def release(self, meta: dict) -> None:
        """The decode worker holds this KV in its cache now: its ring span may be reused."""
        span = meta.get("kv_ring_span")
        if span is not None and self.ring is not None:
            self.ring.release(*span)

    def close(self) -> None:
        self.conn.close()


class TcpHandoff:
    """Cross: KV over authenticated TCP (link_auth). The prefill side keeps one connection per
    decode worker it has sent to; the decode side is handed each KV connection by the
    worker's LinkServer (serve) and checks every header against its model (LinkLimits)
    before reading the payload."""

    def __init__(self, role: str, link, limits=None, addr: str | None = None):
        self.role, self.link, self.limits = role, link, limits
        self.address = addr  # decode: where prefill workers reach it (set once it listens)
        self._socks: dict[str, object] = {}
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self.waitable = self._wake_r

    def send(self, meta: dict, kv) -> None:
        """To meta['decode_addr'] (or this handoff's address). A connection that broke since
        the last send (the decode worker restarted) is replaced once."""
        addr = meta.get("decode_addr") or self.address
        fmt, payload = kv_transfer.dump_payload(_map_tensors(kv, lambda t: t.detach().to("cpu")))
        header = {**meta, **fmt, "kv_bytes": kv_nbytes(kv)}
        for attempt in (0, 1):
            fresh = addr not in self._socks
            sock = self._socks[addr] if not fresh else self._connect(addr)
            self._socks[addr] = sock
            try:
                kv_transfer.send_message(sock, header, payload)
                return
            except kv_transfer.TransferError:
                self._drop(addr)
                if fresh or attempt:
                    raise

    def _connect(self, addr: str):
        sock = link_auth.connect(kv_transfer.parse_addr(addr), self.link, "kv",
                                 timeout_s=CONNECT_TIMEOUT_S)
        sock.settimeout(IO_TIMEOUT_S)
        return sock

    def _drop(self, addr: str) -> None:
        sock = self._socks.pop(addr, None)
        if sock is not None:
            sock.close()

    def serve(self, sock, peer: str) -> None:
        """Decode side: one authenticated KV connection, message after message, until the
        peer closes. A bad frame raises TransferError (the link counts it and closes)."""
        check = self.limits.check_kv_header
        while True:
            # No timeout while idle between requests; a message in progress is bounded.
            sock.settimeout(None)
            try:
                first = sock.recv(1)
            except OSError:
                return
            if not first:
                return
            sock.settimeout(IO_TIMEOUT_S)
            t0, cpu0 = time.perf_counter(), time.thread_time()
            meta, payload = kv_transfer.recv_message(sock, self.limits.max_header_bytes, check,
                                                     prefix=first)
            kv = kv_transfer.load_payload(payload, meta)
            # This thread's CPU for the message: work done beside the decode loop, on its
            # cores, which the loop's own step records do not show.
            meta["kv_recv_cpu_s"] = time.thread_time() - cpu0
            meta["kv_xfer_s"] = time.perf_counter() - t0  # first byte to last, on this side
            meta["kv_peer"] = peer
            self._ready.put((meta, kv))
            os.write(self._wake_w, b"x")

    def release(self, meta: dict) -> None:
        pass  # the KV arrived in a buffer of its own

    def receive_ready(self) -> list:
        out = []
        while True:
            try:
                out.append(self._ready.get_nowait())
            except queue.Empty:
                break
        if out:
            try:
                os.read(self._wake_r, 65536)
            except BlockingIOError:
                pass
        return out

    def close(self) -> None:
        for addr in list(self._socks):
            self._drop(addr)


def make_handoff(spec, peer, link=None, limits=None):
    """The spec's handoff channel; link: the LinkConfig of a tcp one, limits its LinkLimits."""
    if spec.handoff == "pipe":
        return PipeHandoff(spec.role, peer, KvRing(*spec.kv_ring) if spec.kv_ring else None)
    if spec.handoff == "tcp":
        return TcpHandoff(spec.role, link, limits)
    return None
