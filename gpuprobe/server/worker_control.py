"""A standalone worker's side of the front's control connection, shaped like the Pipe a
front-started worker reads (poll, recv, send, and a file descriptor to wait on), so one
WorkerLoop serves both.

The front connects over the link (kind 'control'), says hello and gets the worker's ready
info; then it sends ("add" | "abort" | "drain" | "stop", ...) as JSON frames and receives
the worker's messages the same way. One front at a time: a new front's hello replaces the
old connection. A front that leaves, or is replaced, resets the worker (everything it held is
aborted); the worker itself runs on. An "add" the worker's model cannot take is answered with
("error", rid, why); any other bad frame closes the connection (the link counts it).

Each connection has one thread that both reads and writes its socket (an Outbox carries the
engine loop's messages to it): a TLS connection must not be used by two threads at once, and
the engine loop never waits on a slow front.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import queue
import selectors
import ssl
import threading

from gpuprobe.server.kv_transfer import _LEN, TransferError, encode_frame, recv_message

log = logging.getLogger("gpuprobe.link")
HELLO_TIMEOUT_S = 5.0
PROTOCOL = 1
_ARITY = {"add": 2, "abort": 2, "drain": 1, "stop": 1}
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _no_payload(header: dict) -> None:
    if header["payload_bytes"]:
        raise TransferError("a control message carries no payload", "malformed")


def _message(header) -> list:
    msg = header.get("msg") if isinstance(header, dict) else None
    if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
        raise TransferError("a control frame must hold msg: [kind, ...]", "malformed")
    return msg


def read_control(sock, max_header_bytes: int):
    """One control message (a list [kind, *args]) read blocking, or None when the peer closed
    cleanly."""
    try:
        first = sock.recv(1)
    except OSError:
        return None
    if not first:
        return None
    header, _ = recv_message(sock, max_header_bytes, _no_payload, prefix=first)
    return _message(header)


class Outbox:
    """Frames for one connection's thread to write, and a pipe that wakes it. Its pipe is
    released once by that thread; a put or close after that does nothing (never a write to
    a descriptor number the process has since reused)."""

    def __init__(self):
        self.frames: collections.deque = collections.deque()
        self.closed = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self._lock = threading.Lock()
        self._released = False

    def put(self, frame: bytes) -> None:
        self.frames.append(frame)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            if not self._released:
                os.write(self.wake_w, b"x")

    def release(self) -> None:
        with self._lock:
            self._released = True
            os.close(self.wake_r)
            os.close(self.wake_w)


class ControlChannel:
    """What WorkerLoop reads as its conn. limits and info are set once the model is loaded
    (before the link listens)."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._lock = threading.Lock()
        self._outbox: Outbox | None = None  # the connected front's
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
            if self._outbox is not None:
                self._outbox.put(encode_frame({"msg": list(msg)}))

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
        box = Outbox()
        with self._lock:
            old, self._outbox = self._outbox, box
            self._put(("reset",))  # under the lock: before any add of the new front
            box.put(encode_frame({"msg": ["ready", {**self.info, "protocol": PROTOCOL}]}))
        if old is not None:
            log.info("control: front %s replaces the previous one", peer)
            old.close()
        log.info("control: front %s connected", peer)
        try:
            self._pump(sock, box)
        finally:
            with self._lock:
                current = self._outbox is box
                if current:
                    self._outbox = None
                    self._put(("reset",))
            box.release()
            if current:
                log.info("control: front %s left; everything it sent is aborted", peer)

    def _pump(self, sock, box: Outbox) -> None:
        """Read the front's frames and write the outbox's until either side ends."""
        sock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ)
        sel.register(box.wake_r, selectors.EVENT_READ)
        inbuf, out = bytearray(), bytearray()
        try:
            while not box.closed:
                sel.modify(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0))
                ready = {key.fd for key, _ in sel.select()}
                if box.wake_r in ready:
                    _drain(box.wake_r)
                    while box.frames:
                        out += box.frames.popleft()
                if out:
                    out = self._write(sock, out)
                if sock.fileno() in ready and not self._read(sock, inbuf):
                    return
        finally:
            sel.close()

    def _read(self, sock, inbuf: bytearray) -> bool:
        """Take what has arrived; False once the front closed."""
        while True:
            try:
                data = sock.recv(65536)
            except _WOULD_BLOCK:
                break
            except OSError:
                return False
            if not data:
                if inbuf:
                    raise TransferError(f"closed {len(inbuf)} bytes into a frame", "truncated")
                return False
            inbuf += data
            if not getattr(sock, "pending", lambda: 0)():  # TLS holds decrypted bytes back
                break
        while len(inbuf) >= _LEN.size:
            (n,) = _LEN.unpack(inbuf[:_LEN.size])
            if n > self.limits.max_header_bytes:
                raise TransferError(f"frame of {n} bytes is over the limit", "oversized")
            if len(inbuf) < _LEN.size + n:
                break
            try:
                header = json.loads(bytes(inbuf[_LEN.size:_LEN.size + n]))
            except (ValueError, UnicodeDecodeError) as exc:
                raise TransferError(f"malformed frame: {exc}") from None
            del inbuf[:_LEN.size + n]
            if isinstance(header, dict) and header.get("payload_bytes"):
                raise TransferError("a control message carries no payload")
            self._take(_message(header))
        return True

    @staticmethod
    def _write(sock, out: bytearray) -> bytearray:
        try:
            sent = sock.send(out[:1 << 20])
        except _WOULD_BLOCK:
            return out
        except OSError:
            return bytearray()  # the front is gone: its reader side ends the connection
        del out[:sent]
        return out

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


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except BlockingIOError:
        pass
