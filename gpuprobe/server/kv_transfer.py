"""Prefill -> decode KV handoff over TCP for the cross layout: framed, chunked, with timeouts.

A message is: 8-byte big-endian header length, a JSON header (request id, token ids,
sampling params, first token, payload size, payload format), then the KV payload sent in
CHUNK_BYTES pieces. The worker link's control messages use the same frame with no payload.
A receiver passes limits (the header's size, a check of the header before any payload byte
is read), so a peer cannot make it allocate more than the model's KV for one full context. A single tensor (what ModelRunner.export_kv returns) goes as its raw bytes,
its dtype and shape in the header, and comes back as a view of the received buffer: no
serializer on either side. torch.save/torch.load cost the decode worker about 0.6 ms per
request in deserializing alone, on the core its decode loop runs on (bench/kv_transfer_bench.py).
Anything else falls back to torch.save, so this module does not depend on the KV layout. Only
cross-layout workers import it (torch is there).
"""

from __future__ import annotations

import io
import json
import math
import socket
import struct

CHUNK_BYTES = 4 << 20
_LEN = struct.Struct(">Q")
MAX_HEADER_BYTES = 16 << 20


class TransferError(Exception):
    """The peer closed, timed out or sent something malformed. `reason` is the /metrics label
    a worker counts it under: truncated, timeout, oversized, malformed, bad_shape."""

    def __init__(self, message: str, reason: str = "malformed"):
        super().__init__(message)
        self.reason = reason


def parse_addr(addr: str) -> tuple[str, int]:
    """'host:port' -> (host, port). Raises ValueError naming the bad part."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"address {addr!r}: expected host:port")
    return host, int(port)


def dump_payload(kv) -> tuple[dict, bytes | memoryview]:
    """(header fields, payload) for kv: raw bytes for one tensor, torch.save otherwise."""
    import torch

    if isinstance(kv, torch.Tensor):
        t = kv.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b""
        return ({"kv_format": "raw", "kv_dtype": str(t.dtype).removeprefix("torch."),
                 "kv_shape": list(t.shape)}, memoryview(raw).cast("B") if len(raw) else raw)
    buf = io.BytesIO()
    torch.save(kv, buf)
    return {"kv_format": "torch"}, buf.getvalue()


def load_payload(data: bytes | bytearray | memoryview, header: dict | None = None):
    """The KV of a received message; raises TransferError when the payload does not match its
    header. A raw tensor is a view of `data` (a bytearray from recv_message: writable)."""
    import torch

    header = header or {}
    if header.get("kv_format") != "raw":  # "torch", or a peer that predates the raw format
        try:
            return torch.load(io.BytesIO(data), weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad payload
            raise TransferError(f"payload is not a torch.save stream: {exc}") from exc
    dtype = getattr(torch, str(header.get("kv_dtype")), None)
    shape = header.get("kv_shape")
    if not isinstance(dtype, torch.dtype) or not isinstance(shape, list) \
            or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise TransferError(f"raw KV header: bad kv_dtype {header.get('kv_dtype')!r} or "
                            f"kv_shape {shape!r}")
    want = math.prod(shape) * dtype.itemsize
    if len(data) != want:
        raise TransferError(f"raw KV payload: {len(data)} bytes, kv_shape {shape} of "
                            f"{header['kv_dtype']} needs {want}")
    if not want:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).view(shape)


def encode_frame(header: dict, payload_bytes: int = 0) -> bytes:
    """The length prefix and JSON header of one message (its payload follows, if any)."""
    head = json.dumps({**header, "payload_bytes": payload_bytes},
                      separators=(",", ":")).encode()
    return _LEN.pack(len(head)) + head


def send_message(sock: socket.socket, header: dict, payload: bytes | memoryview = b"") -> int:
    """Send one framed message; returns payload bytes sent. Socket timeouts raise TransferError."""
    try:
        sock.sendall(encode_frame(header, len(payload)))
        view = memoryview(payload)
        for off in range(0, len(view), CHUNK_BYTES):
            sock.sendall(view[off:off + CHUNK_BYTES])
    except (TimeoutError, OSError) as exc:
        raise TransferError(f"send failed: {exc}") from exc
    return len(payload)


def _recv_exact(sock: socket.socket, n: int, into: bytearray | None = None) -> bytearray:
    buf = into if into is not None else bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:], min(n - got, CHUNK_BYTES))
        except TimeoutError as exc:
            raise TransferError(f"recv timed out after {got}/{n} bytes", "timeout") from exc
        except OSError as exc:
            raise TransferError(f"recv failed after {got}/{n} bytes: {exc}", "truncated") from exc
        if k == 0:
            raise TransferError(f"peer closed after {got}/{n} bytes", "truncated")
        got += k
    return buf


def recv_message(sock: socket.socket, max_header_bytes: int = MAX_HEADER_BYTES, check=None,
                 prefix: bytes = b"") -> tuple[dict, bytearray]:
    """Receive one framed message -> (header, payload bytes). prefix: the frame's first bytes,
    already read. check(header) may raise TransferError; it runs before the payload is read,
    and must bound payload_bytes (without one, only a well-formed count is required)."""
    (n,) = _LEN.unpack(prefix + bytes(_recv_exact(sock, _LEN.size - len(prefix))))
    if n > max_header_bytes:
        raise TransferError(f"header of {n} bytes is over the limit of {max_header_bytes}",
                            "oversized")
    try:
        header = json.loads(bytes(_recv_exact(sock, n)))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TransferError(f"malformed header: {exc}") from exc
    size = header.get("payload_bytes") if isinstance(header, dict) else None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise TransferError("header is not an object with a payload_bytes count")
    if check is not None:
        check(header)
    payload = _recv_exact(sock, size)
    return header, payload


def connect(addr: str, timeout_s: float) -> socket.socket:
    host, port = parse_addr(addr)
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def listen(addr: str) -> socket.socket:
    host, port = parse_addr(addr)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(8)
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
