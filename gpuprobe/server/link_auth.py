"""Who may speak on a worker's link port: a challenge, and an HMAC of the shared secret.

Every connection to a worker (the front's control connection, a prefill worker's KV
connection) opens with a fixed-size exchange, so nothing the peer says is parsed before it
has proved the secret, and the secret itself never crosses the wire:

    worker -> peer    MAGIC, worker nonce (32 bytes)
    peer   -> worker  MAGIC, kind ('C' control | 'K' kv), peer nonce (32), HMAC-SHA256 proof
    worker -> peer    the worker's own proof (so the peer knows it reached a holder of the secret)

Both proofs cover both nonces, so neither can be replayed on another connection. With a
certificate the whole connection runs inside TLS first (confidentiality); the HMAC still
decides who is let in. Stdlib only (hmac, secrets, ssl): the front imports this without torch.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuprobe.errors import UserError

MAGIC = b"GPLINK1\n"
NONCE_BYTES = 32
PROOF_BYTES = 32  # SHA-256
KINDS = {b"C": "control", b"K": "kv"}
CHALLENGE_BYTES = len(MAGIC) + NONCE_BYTES
HELLO_BYTES = len(MAGIC) + 1 + NONCE_BYTES + PROOF_BYTES
HANDSHAKE_TIMEOUT_S = 5.0
MIN_SECRET_CHARS = 16


class LinkRefused(Exception):
    """A connection that may not go on; `reason` is the /metrics label it is counted under."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason = reason


@dataclass(frozen=True)
class LinkConfig:
    """The link's shared secret and optional TLS files. cert/key: this side serves TLS with
    them (a worker); ca: this side, connecting, trusts workers whose certificate it signs."""

    secret: bytes = field(repr=False)
    cert: str | None = None
    key: str | None = None
    ca: str | None = None

    def server_tls(self) -> ssl.SSLContext | None:
        if not self.cert:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def client_tls(self) -> ssl.SSLContext | None:
        if not self.ca:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        # Workers are reached by address, often an IP: the certificate must chain to the CA
        # given, its name is not checked (the HMAC names who may speak).
        ctx.check_hostname = False
        ctx.load_verify_locations(self.ca)
        return ctx


def new_local_config() -> LinkConfig:
    """A fresh random secret for workers the front starts itself (the local cross layout)."""
    return LinkConfig(secrets.token_hex(32).encode())


def load_link_config(secret_file: str | None, cert: str | None = None, key: str | None = None,
                     ca: str | None = None, flag: str = "--link-secret-file") -> LinkConfig:
    """LinkConfig from the flags' files; UserError names the flag and file at fault."""
    if not secret_file:
        raise UserError(f"{flag} is required: every worker and the front share one secret")
    path = Path(secret_file)
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot read ({exc.strerror})") from None
    if len(secret) < MIN_SECRET_CHARS:
        raise UserError(f"{flag} {path}: the secret must be at least {MIN_SECRET_CHARS} "
                        f"characters (e.g. `openssl rand -hex 32 > {path}`)")
    if bool(cert) != bool(key):
        raise UserError("--link-tls-cert and --link-tls-key go together")
    for name, f in (("--link-tls-cert", cert), ("--link-tls-key", key), ("--link-tls-ca", ca)):
        if f and not Path(f).is_file():
            raise UserError(f"{name} {f}: no such file")
    cfg = LinkConfig(secret, cert, key, ca)
    try:
        cfg.server_tls()
        cfg.client_tls()
    except (ssl.SSLError, OSError) as exc:
        raise UserError(f"--link-tls-*: cannot load the certificate files: {exc}") from None
    return cfg


def _proof(secret: bytes, side: bytes, kind: bytes, worker_nonce: bytes,
           peer_nonce: bytes) -> bytes:
    return hmac.new(secret, side + kind + worker_nonce + peer_nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """n bytes; with a deadline (time.monotonic()), all of them by then, so a peer trickling
    a byte at a time cannot hold a connection slot past HANDSHAKE_TIMEOUT_S."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError:
            raise LinkRefused("timeout", f"{len(buf)}/{n} handshake bytes") from None
        except OSError as exc:
            raise LinkRefused("truncated", str(exc)) from None
        if not chunk:
            raise LinkRefused("truncated", f"closed after {len(buf)}/{n} handshake bytes")
        buf += chunk
    return bytes(buf)


def accept_handshake(sock: socket.socket, cfg: LinkConfig, kinds: tuple[str, ...]) -> str:
    """Worker side, on a fresh connection (timeout set by the caller): the kind the peer
    proved the secret for. Raises LinkRefused before reading anything past the hello."""
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    nonce = secrets.token_bytes(NONCE_BYTES)
    try:
        sock.sendall(MAGIC + nonce)
    except OSError as exc:
        raise LinkRefused("truncated", str(exc)) from None
    hello = _recv_exact(sock, len(MAGIC), deadline)
    if hello != MAGIC:
        raise LinkRefused("no_handshake", f"opened with {hello[:8]!r}")
    rest = _recv_exact(sock, HELLO_BYTES - len(MAGIC), deadline)
    kind_b, peer_nonce, proof = rest[:1], rest[1:1 + NONCE_BYTES], rest[1 + NONCE_BYTES:]
    kind = KINDS.get(kind_b)
    if kind is None or kind not in kinds:
        raise LinkRefused("no_handshake", f"kind {kind_b!r} is not served here")
    if not hmac.compare_digest(proof, _proof(cfg.secret, b"peer", kind_b, nonce, peer_nonce)):
        raise LinkRefused("bad_proof", "the peer does not hold this link's secret")
    try:
        sock.sendall(_proof(cfg.secret, b"worker", kind_b, nonce, peer_nonce))
    except OSError as exc:
        raise LinkRefused("truncated", str(exc)) from None
    return kind


def _hello(cfg: LinkConfig, kind: str, challenge: bytes) -> tuple[bytes, bytes, bytes]:
    """(hello to send, kind byte, worker nonce) for a challenge read from a worker."""
    if challenge[:len(MAGIC)] != MAGIC:
        raise LinkRefused("no_handshake", "the peer is not a gpuprobe worker link")
    kind_b = next(k for k, v in KINDS.items() if v == kind)
    worker_nonce, nonce = challenge[len(MAGIC):], secrets.token_bytes(NONCE_BYTES)
    return (MAGIC + kind_b + nonce + _proof(cfg.secret, b"peer", kind_b, worker_nonce, nonce),
            kind_b, worker_nonce)


def _check_worker(cfg: LinkConfig, hello: bytes, kind_b: bytes, worker_nonce: bytes,
                  answer: bytes) -> None:
    nonce = hello[len(MAGIC) + 1:len(MAGIC) + 1 + NONCE_BYTES]
    if not hmac.compare_digest(answer, _proof(cfg.secret, b"worker", kind_b, worker_nonce,
                                              nonce)):
        raise LinkRefused("bad_proof", "the worker does not hold this link's secret")


def connect(addr: tuple[str, int], cfg: LinkConfig, kind: str,
            timeout_s: float = HANDSHAKE_TIMEOUT_S) -> socket.socket:
    """Blocking client (a prefill worker's KV connection): connected, TLS if configured,
    and authenticated both ways. Raises OSError or LinkRefused."""
    sock = socket.create_connection(addr, timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tls = cfg.client_tls()
        if tls is not None:
            sock = tls.wrap_socket(sock)
        hello, kind_b, worker_nonce = _hello(cfg, kind, _recv_exact(sock, CHALLENGE_BYTES))
        sock.sendall(hello)
        _check_worker(cfg, hello, kind_b, worker_nonce, _recv_exact(sock, PROOF_BYTES))
        return sock
    except BaseException:
        sock.close()
        raise


async def open_link(host: str, port: int, cfg: LinkConfig, kind: str,
                    timeout_s: float = HANDSHAKE_TIMEOUT_S):
    """asyncio client (the front's control connection): (reader, writer), authenticated.
    Raises OSError, asyncio.TimeoutError, asyncio.IncompleteReadError or LinkRefused."""
    tls = cfg.client_tls()
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None),
        timeout_s)
    try:
        challenge = await asyncio.wait_for(reader.readexactly(CHALLENGE_BYTES), timeout_s)
        hello, kind_b, worker_nonce = _hello(cfg, kind, challenge)
        writer.write(hello)
        answer = await asyncio.wait_for(reader.readexactly(PROOF_BYTES), timeout_s)
        _check_worker(cfg, hello, kind_b, worker_nonce, answer)
        return reader, writer
    except BaseException:
        writer.close()
        raise
