"""A shared-memory ring the intra layout's prefill worker writes KV into and its decode
worker reads KV from: one region for the layout's life, mapped by both, as the two
partitions of one GPU share its device memory.

The front creates the file (in /dev/shm, space reserved up front, so a full tmpfs fails here
and not with a SIGBUS mid-run) and unlinks it once both workers have mapped it. One writer
(prefill) and one reader (decode): the writer places a message's tensors at its head and
sends their span over the handoff pipe; the reader copies them into its cache, then
releases the span; releases may come out of order, the ring's tail moves past those that
are contiguous. The tail lives in the region's first 8 bytes (written by the reader only).
A message that does not fit goes the old way (torch's shared-memory handles), so a full
ring slows a handoff and never fails it.

Before this ring, each handoff put its tensors in fresh shared memory and the decode
worker fetched their file descriptor from the prefill process over a socket: a new mapping
and a round trip to a process whose core was busy with prefill (model-log.md).
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from dataclasses import dataclass

from gpuprobe.errors import UserError

HEADER_BYTES = 64
ALIGN = 64
DEFAULT_MB = 256
MIN_MB = 16
_TAIL = struct.Struct("<Q")


@dataclass(frozen=True)
class RingRef:
    """A tensor's place in the ring: what the pipe carries instead of the tensor."""

    offset: int  # from the data area's start
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


def ring_mb() -> int:
    """GPUPROBE_KV_RING_MB, a whole number of MiB (0 turns the ring off), else DEFAULT_MB.
    UserError naming the variable when it is not one (`serve` checks it before starting)."""
    raw = os.environ.get("GPUPROBE_KV_RING_MB", "").strip()
    if not raw:
        return DEFAULT_MB
    try:
        mb = int(raw)
    except ValueError:
        mb = -1
    if mb < 0:
        raise UserError(f"GPUPROBE_KV_RING_MB={raw!r}: not a whole number of MiB (0 turns the ring off)")
    return mb


def create_file(mb: int | None = None) -> tuple[str, int] | None:
    """Create and reserve the ring's file -> (path, data bytes), or None when it cannot be
    had (no tmpfs space even at MIN_MB, or turned off). Halves the size on ENOSPC."""
    mb = ring_mb() if mb is None else mb
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    while mb >= MIN_MB:
        fd, path = tempfile.mkstemp(prefix="gpuprobe-kv-", dir=shm)
        size = mb << 20
        try:
            os.posix_fallocate(fd, 0, HEADER_BYTES + size)
            return path, size
        except OSError:
            os.unlink(path)
            mb //= 2
        finally:
            os.close(fd)
    return None


class KvRing:
    """One process's mapping of the ring. role 'prefill' writes, 'decode' reads."""

    def __init__(self, path: str, size: int):
        self.size = size
        fd = os.open(path, os.O_RDWR)
        try:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._mm = mmap.mmap(fd, HEADER_BYTES + size, flags=flags)
        finally:
            os.close(fd)
        self._head = 0  # writer: bytes allocated since the start (monotonic)
        self._tail = 0  # reader: bytes released since the start (monotonic)
        self._released: dict[int, int] = {}  # reader: span start -> end, released early

    # -- writer ------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> tuple[int, int, int] | None:
        """Reserve nbytes contiguous -> (span start, span end, data offset), the span in
        monotonic bytes, or None when the ring has no room for them now. A span that would
        cross the end starts over at offset 0 and holds the skipped bytes too."""
        n = -(-nbytes // ALIGN) * ALIGN
        if n > self.size:
            return None
        start = self._head
        pos = start % self.size
        skip = self.size - pos if pos + n > self.size else 0
        end = start + skip + n
        if end - self.tail() > self.size:
            return None
        self._head = end
        return start, end, 0 if skip else pos

    def tail(self) -> int:
        return _TAIL.unpack_from(self._mm, 0)[0]

    # -- both ------------------------------------------------------------------------
    def view(self, offset: int, nbytes: int):
        """A uint8 torch tensor over nbytes of the data area at offset (no copy)."""
        import torch

        return torch.frombuffer(self._mm, dtype=torch.uint8, count=nbytes,
                                offset=HEADER_BYTES + offset)

    # -- reader ------------------------------------------------------------------------
    def release(self, start: int, end: int) -> None:
        """The reader is done with a span; the tail moves over every span done in order."""
        self._released[start] = end
        moved = False
        while self._tail in self._released:
            self._tail = self._released.pop(self._tail)
            moved = True
        if moved:
            _TAIL.pack_into(self._mm, 0, self._tail)
