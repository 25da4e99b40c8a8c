"""The front's handle on a worker started by `gpuprobe worker`, anywhere: the control
connection over the link (authenticated, TLS when a CA is given), shaped like the handle of a
worker the front spawned (send, alive, info, worker_id), so the router treats both alike.

Messages arrive as JSON frames on the event loop and go to on_message(instance, handle, msg);
a connection that ends becomes ("died", reason). The handle can connect again (a re-probe),
and says ("rejoined",) when it does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from gpuprobe.server.kv_transfer import _LEN, TransferError, encode_frame, parse_addr
from gpuprobe.server.link_auth import LinkRefused, open_link
from gpuprobe.server.worker_control import PROTOCOL

log = logging.getLogger("gpuprobe.server")
MAX_FRAME_BYTES = 16 << 20  # a worker has proved the secret; this only stops a runaway
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RemoteSpec:
    """A worker the front was given by address (serve --prefill-workers / --decode-workers)."""

    worker_id: str
    role: str  # 'prefill' | 'decode'
    addr: str  # host:port of its link
    cores: tuple[int, ...] = ()


async def read_frame(reader: asyncio.StreamReader) -> list:
    """One control message from a worker: [kind, *args]."""
    (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
    if n > MAX_FRAME_BYTES:
        raise TransferError(f"frame of {n} bytes", "oversized")
    try:
        header = json.loads(await reader.readexactly(n))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TransferError(f"malformed frame: {exc}") from None
    msg = header.get("msg") if isinstance(header, dict) else None
    if not isinstance(msg, list) or not msg or not isinstance(msg[0], str):
        raise TransferError("a frame without msg: [kind, ...]")
    return msg


class RemoteWorkerHandle:
    def __init__(self, spec: RemoteSpec, link, on_message):
        self.spec, self.link, self.on_message = spec, link, on_message
        self.instance = None  # the LayoutInstance, set by it
        self.info: dict = {}
        self.alive = False
        self.proc = None  # not the front's child
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self.closed = False

    @property
    def worker_id(self) -> str:
        return self.spec.worker_id

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")

    async def connect(self, model: str, max_context: int) -> None:
        """Connect, authenticate, say hello, check the worker's ready info; then read its
        messages in a task. Raises RuntimeError naming the address and the cause."""
        host, port = parse_addr(self.spec.addr)
        try:
            reader, writer = await open_link(host, port, self.link, "control", CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, LinkRefused) as exc:
            raise RuntimeError(f"{self.spec.role} worker {self.spec.addr}: "
                               f"{_describe(exc)}") from None
        try:
            writer.write(encode_frame({"msg": ["hello", {"protocol": PROTOCOL, "model": model,
                                                         "worker_id": self.worker_id}]}))
            msg = await asyncio.wait_for(read_frame(reader), CONNECT_TIMEOUT_S)
            info = msg[1] if msg[0] == "ready" and len(msg) == 2 else None
            self._check(info, model, max_context)
        except BaseException as exc:
            writer.close()
            if isinstance(exc, RuntimeError):
                raise
            raise RuntimeError(f"{self.spec.role} worker {self.spec.addr}: "
                               f"{_describe(exc)}") from None
        self.info = {**info, "addr": self.spec.addr}
        self._writer, self.alive = writer, True
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader, writer))

    def _check(self, info, model: str, max_context: int) -> None:
        where = f"{self.spec.role} worker {self.spec.addr}"
        if not isinstance(info, dict):
            raise RuntimeError(f"{where}: answered without its ready info")
        if info.get("role") != self.spec.role:
            raise RuntimeError(f"{where} is a {info.get('role')} worker")
        if info.get("model") != model:
            raise RuntimeError(f"{where} serves model {info.get('model')!r}, the front {model!r}")
        if not isinstance(info.get("max_context"), int) or info["max_context"] < max_context:
            raise RuntimeError(f"{where} holds {info.get('max_context')} tokens of context, the "
                               f"front admits {max_context}: give both the same --kv-cache-mb")

    def send(self, msg) -> bool:
        if not self.alive or self._writer is None:
            return False
        try:
            self._writer.write(encode_frame({"msg": list(msg)}))
            return True
        except (OSError, RuntimeError):
            return False

    async def _read(self, reader, writer) -> None:
        try:
            while True:
                msg = await read_frame(reader)
                self.on_message(self.instance, self, tuple(msg))
        except asyncio.CancelledError:
            return
        except asyncio.IncompleteReadError:
            reason = f"worker {self.worker_id} lost: the connection closed"
        except (OSError, TransferError) as exc:
            reason = f"worker {self.worker_id} lost: {_describe(exc)}"
        self._lost(writer, reason)

    def _lost(self, writer, reason: str) -> None:
        writer.close()
        if self._writer is not writer or not self.alive:
            return
        self.alive = False
        if not self.closed:
            self.on_message(self.instance, self, ("died", reason))

    async def close(self) -> None:
        """Tell the worker this front is done (it aborts what it holds) and hang up."""
        self.closed = True
        self.send(("stop",))
        self.alive = False
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.IncompleteReadError):
        return ("closed the connection (in the handshake: do the front and the worker share "
                "one --link-secret-file?)")
    if isinstance(exc, asyncio.TimeoutError):
        return "did not answer in time"
    if isinstance(exc, LinkRefused) and exc.reason == "bad_proof":
        return "refused: the link secrets differ"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
