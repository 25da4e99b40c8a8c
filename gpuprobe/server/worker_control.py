"""A standalone worker's side of the front's control connection, shaped like the Pipe a
front-started worker reads (poll, recv, send, and a file descriptor to wait on), so one
WorkerLoop serves both.

The front connects over the link (kind 'control'), says hello and gets the worker's ready
info; then it sends ("add" | "abort" | "drain" | "stop", ...) as JSON frames and receives
the worker's messages the same way. One front at a time: a new front's hello replaces the
old connection. A front that leaves, or is replaced, resets the worker (everything it held is
aborted); the worker itself runs on. An "add" the worker's model cannot take is answered with
("error", rid, why); any other bad frame closes the connection (the link counts it).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading

from gpuprobe.server.kv_transfer import TransferError, encode_frame, recv_message

log = logging.getLogger("gpuprobe.link")
HELLO_TIMEOUT_S = 5.0
PROTOCOL = 1
_ARITY = {"add": 2, "abort": 2, "drain": 1, "stop": 1}


def _no_payload(header: dict) -> None:
    if header["payload_bytes"]:
        raise TransferError("a control message carries no payload", "malformed")


def read_control(sock, max_header_bytes: int):
    """One control message (a list [kind, *args]), or None when the peer closed cleanly."""
    try:
        first = sock.recv(1)
    except OSError:
        return None
    if not first:
        return None
    header, _ = recv_message(sock, max_header_bytes, _no_payload, prefix=first)
    msg = header.get("msg")
    if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
        raise TransferError("a control frame must hold msg: [kind, ...]", "malformed")
    return msg


class ControlChannel:
    """What WorkerLoop reads as its conn. limits and info are set once the model is loaded
    (before the link listens)."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._lock = threading.Lock()
        self._sock = None
        self.info: dict | None = None
        self.limits = None

    # ---- the worker loop's side ----------------------------------------------------------
    def fileno(self) -> int:
        return self._wake_r

    def poll(self) -> bool:
        return not self._queue.empty()

    def recv(self):
        try:
            os.read(self._wake_r, 65536)
        except BlockingIOError:
            pass
        return self._queue.get_nowait()

    def send(self, msg) -> None:
        """To the front connected now; dropped when none is (it would not know the request)."""
        if msg[0] == "ready":
            self.info = msg[1]
            return
        with self._lock:
            if self._sock is not None:
                self._send(self._sock, msg)

    def _send(self, sock, msg) -> None:
        try:
            sock.sendall(encode_frame({"msg": list(msg)}))
        except OSError:
            _shutdown(sock)  # its reader sees the end and resets the worker

    def _put(self, msg: tuple) -> None:
        self._queue.put(msg)
        os.write(self._wake_w, b"x")

    # ---- the link's side (one thread per connection) ------------------------------------
    def serve(self, sock, peer: str) -> None:
        """Handler of a 'control' connection: hello, then messages until it closes."""
        sock.settimeout(HELLO_TIMEOUT_S)
        hello = read_control(sock, self.limits.max_header_bytes)
        if hello is None:
            return
        if hello[0] != "hello" or len(hello) != 2 or not isinstance(hello[1], dict):
            raise TransferError("the first control message must be hello", "malformed")
        sock.settimeout(None)
        with self._lock:
            old, self._sock = self._sock, sock
            self._put(("reset",))  # under the lock: before any add of the new front
            self._send(sock, ("ready", {**self.info, "protocol": PROTOCOL}))
        if old is not None:
            log.info("control: front %s replaces the previous one", peer)
            _shutdown(old)
        log.info("control: front %s connected", peer)
        try:
            while (msg := read_control(sock, self.limits.max_header_bytes)) is not None:
                self._take(msg)
        finally:
            with self._lock:
                current = self._sock is sock
                if current:
                    self._sock = None
                    self._put(("reset",))
            if current:
                log.info("control: front %s left; everything it sent is aborted", peer)

    def _take(self, msg: list) -> None:
        kind = msg[0]
        if _ARITY.get(kind) != len(msg):
            raise TransferError(f"unknown control message {kind!r} of {len(msg)} parts",
                                "malformed")
        if kind == "abort" and not isinstance(msg[1], str):
            raise TransferError("abort takes a request id", "malformed")
        if kind == "add":
            try:
                self.limits.check_request(msg[1])
            except TransferError as exc:
                rid = msg[1].get("rid") if isinstance(msg[1], dict) else None
                if not isinstance(rid, str):
                    raise
                self.send(("error", rid, f"refused by the worker: {exc}"))
                return
        # stop from a front means: this front is done with us; the worker runs on
        self._put(("reset",) if kind == "stop" else tuple(msg))


def _shutdown(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
