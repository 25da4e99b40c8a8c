"""A worker's link port: accepts connections, authenticates each (link_auth), hands it to the
handler of its kind, and counts and logs every connection it refuses or closes for a bad frame.

One thread per connection, at most max_connections at once: one past that is closed at
accept and counted as `busy`. An unauthenticated connection gets HANDSHAKE_TIMEOUT_S to prove
the secret. A handler returns when its peer closes cleanly and raises TransferError (with a
reason) on a bad frame; either way only that connection ends.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

from gpuprobe.server.kv_transfer import TransferError, parse_addr
from gpuprobe.server.link_auth import HANDSHAKE_TIMEOUT_S, LinkConfig, LinkRefused, accept_handshake

log = logging.getLogger("gpuprobe.link")
MAX_CONNECTIONS = 64
REASONS = ("busy", "no_handshake", "bad_proof", "truncated", "timeout", "tls", "oversized",
           "malformed", "bad_shape")


class LinkCounters:
    """Connections accepted (by kind) and refused or cut (by reason); read by /metrics."""

    def __init__(self):
        self._lock = threading.Lock()
        self.accepted: dict[str, int] = {}
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.open = 0

    def add(self, table: dict, key: str) -> None:
        with self._lock:
            table[key] = table.get(key, 0) + 1

    def move_open(self, delta: int) -> None:
        with self._lock:
            self.open += delta


class LinkServer:
    """Listens on `addr` ('host:port'; port 0 picks one, see .address) for the kinds in
    handlers: {'control' | 'kv': handler(sock, peer) -> None}."""

    def __init__(self, addr: str, cfg: LinkConfig, handlers: dict, counters: LinkCounters,
                 max_connections: int = MAX_CONNECTIONS):
        host, port = parse_addr(addr)
        self.cfg, self.handlers, self.counters = cfg, handlers, counters
        self._tls = cfg.server_tls()
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._sock = socket.create_server((host, port), backlog=128)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._closed = False

    def start(self) -> LinkServer:
        threading.Thread(target=self._accept, name="link-accept", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, peer = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # EMFILE and the like: this connection is lost, not the port
                continue
            where = f"{peer[0]}:{peer[1]}"
            if not self._slots.acquire(blocking=False):
                self._refuse(where, LinkRefused("busy", f"{self.max_connections} connections "
                                                        f"open already"))
                sock.close()
                continue
            threading.Thread(target=self._serve, args=(sock, where), daemon=True,
                             name="link-conn").start()

    def _serve(self, sock: socket.socket, where: str) -> None:
        self.counters.move_open(1)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            if self._tls is not None:
                try:
                    sock = self._tls.wrap_socket(sock, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    raise LinkRefused("tls", str(exc)) from None
            kind = accept_handshake(sock, self.cfg, tuple(self.handlers))
            self.counters.add(self.counters.accepted, kind)
            self.handlers[kind](sock, where)
        except (LinkRefused, TransferError) as exc:
            self._refuse(where, exc)
        except Exception as exc:  # noqa: BLE001 - a handler's bug ends this connection only
            log.exception("link %s: connection from %s failed", self.address, where)
            self._refuse(where, TransferError(str(exc)))
        finally:
            try:
                sock.close()
            except OSError:
                pass
            self.counters.move_open(-1)
            self._slots.release()

    def _refuse(self, where: str, exc: Exception) -> None:
        reason = getattr(exc, "reason", "malformed")
        self.counters.add(self.counters.refused, reason)
        log.warning("link %s: closed connection from %s (%s): %s", self.address, where, reason,
                    str(exc)[:200])
