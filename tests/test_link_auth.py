"""The worker link without a model: the HMAC handshake over real sockets (a peer with the
secret gets through, one without is refused before anything it sends is read), TLS with a
self-signed certificate, the connection bound, and the header checks a KV frame must pass."""
from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from gpuprobe.server import kv_transfer as K
from gpuprobe.server.link_auth import MAGIC, LinkConfig, LinkRefused, connect
from gpuprobe.server.link_limits import LinkLimits
from gpuprobe.server.link_server import LinkCounters, LinkServer

SECRET = b"0123456789abcdef-link-test"


def _wait(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _echo_server(cfg: LinkConfig, max_connections: int = 64):
    """A LinkServer whose kv handler echoes one frame back; calls records who got through."""
    calls = []

    def handler(sock, peer):
        calls.append(peer)
        header, payload = K.recv_message(sock)
        K.send_message(sock, {"echo": header["n"]}, payload)

    counters = LinkCounters()
    server = LinkServer("127.0.0.1:0", cfg, {"kv": handler}, counters, max_connections).start()
    return server, counters, calls


def _addr(server) -> tuple[str, int]:
    return K.parse_addr(server.address)


def test_the_secret_gets_a_peer_through_and_a_frame_back():
    server, counters, calls = _echo_server(LinkConfig(SECRET))
    try:
        with connect(_addr(server), LinkConfig(SECRET), "kv") as sock:
            K.send_message(sock, {"n": 7}, b"abc")
            header, payload = K.recv_message(sock)
        assert header["echo"] == 7 and bytes(payload) == b"abc" and len(calls) == 1
        assert counters.accepted == {"kv": 1} and sum(counters.refused.values()) == 0
    finally:
        server.close()


def test_a_wrong_secret_is_refused_before_anything_is_read():
    server, counters, calls = _echo_server(LinkConfig(SECRET))
    try:
        with pytest.raises((LinkRefused, OSError)):
            connect(_addr(server), LinkConfig(b"not-the-secret-at-all"), "kv")
        # a peer that skips the handshake and sends a frame at once
        with socket.create_connection(_addr(server)) as raw:
            raw.sendall(K.encode_frame({"rid": "x"}, 10) + b"x" * 10)
            assert raw.recv(100)[:len(MAGIC)] == MAGIC  # the challenge, then nothing
            try:
                assert raw.recv(100) == b""
            except ConnectionResetError:  # closed with our frame unread
                pass
        # a handshake cut short
        with socket.create_connection(_addr(server)) as raw:
            raw.recv(100)
            raw.sendall(MAGIC + b"K" + b"\0" * 10)
        _wait(lambda: counters.refused["truncated"] == 1)
        assert counters.refused["bad_proof"] == 1 and counters.refused["no_handshake"] == 1
        assert calls == [] and counters.accepted == {}
    finally:
        server.close()


def test_connections_past_the_bound_are_refused_as_busy():
    server, counters, _ = _echo_server(LinkConfig(SECRET), max_connections=3)
    idle = [socket.create_connection(_addr(server)) for _ in range(3)]
    try:
        _wait(lambda: counters.open == 3)
        with socket.create_connection(_addr(server)) as extra:
            assert extra.recv(100) == b""  # closed at accept, no challenge
        _wait(lambda: counters.refused["busy"] == 1)
    finally:
        for s in idle:
            s.close()
    _wait(lambda: counters.open == 0)
    with connect(_addr(server), LinkConfig(SECRET), "kv") as sock:  # slots are free again
        K.send_message(sock, {"n": 1}, b"")
        assert K.recv_message(sock)[0]["echo"] == 1
    server.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a certificate")
def test_tls_with_a_self_signed_certificate(tmp_path):
    cert, key = tmp_path / "link.crt", tmp_path / "link.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=gpuprobe-worker", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server, counters, calls = _echo_server(LinkConfig(SECRET, str(cert), str(key)))
    try:
        with connect(_addr(server), LinkConfig(SECRET, ca=str(cert)), "kv") as sock:
            assert sock.version() is not None  # an SSLSocket: the frame went encrypted
            K.send_message(sock, {"n": 3}, b"kv-bytes")
            header, payload = K.recv_message(sock)
        assert header["echo"] == 3 and bytes(payload) == b"kv-bytes"
        with pytest.raises((LinkRefused, OSError)):  # plain TCP to a TLS link
            connect(_addr(server), LinkConfig(SECRET), "kv", timeout_s=2)
        _wait(lambda: counters.refused["tls"] == 1)
        assert len(calls) == 1
    finally:
        server.close()


LIMITS = LinkLimits(vocab_size=512, max_context=64, kv_dtype="float32", kv_itemsize=4,
                    kv_dims=(4, 2, 32))


def _kv_header(**change) -> dict:
    h = {"rid": "r1", "prompt": [1, 2, 3], "max_tokens": 8, "temperature": 0.0, "top_p": 1.0,
         "seed": None, "ignore_eos": True, "arrival_s": 1.0, "first_token": 9,
         "handoff_start_s": 2.0, "kv_format": "raw", "kv_dtype": "float32",
         "kv_shape": [4, 2, 3, 2, 32], "kv_bytes": 6144, "payload_bytes": 6144}
    return {**h, **change}


@pytest.mark.parametrize("change, reason, words", [
    ({}, None, ""),
    ({"kv_shape": [4, 2, 4, 2, 32]}, "bad_shape", "this model's KV for 3 prompt tokens"),
    ({"kv_dtype": "float16"}, "bad_shape", "this worker holds float32"),
    ({"kv_format": "torch"}, "bad_shape", "kv_format must be 'raw'"),
    ({"payload_bytes": 6000}, "bad_shape", "does not match kv_shape"),
    ({"payload_bytes": 1 << 40}, "oversized", "over one full context's KV"),
    ({"prompt": [1, 2, 512]}, "malformed", "token ids must be integers in [0, 512)"),
    ({"max_tokens": 62}, "malformed", "max_tokens must be an integer in [1, 61]"),
    ({"temperature": "hot"}, "malformed", "temperature must be a number"),
    ({"extra": 1}, "malformed", "unknown field 'extra'"),
    ({"first_token": -1}, "malformed", "first_token must be an integer"),
])
def test_kv_headers_are_checked_against_the_model(change, reason, words):
    if reason is None:
        LIMITS.check_kv_header(_kv_header())
        assert LIMITS.max_payload_bytes == 64 * 2048
        return
    with pytest.raises(K.TransferError, match=re.escape(words)) as err:
        LIMITS.check_kv_header(_kv_header(**change))
    assert err.value.reason == reason


def test_an_oversized_header_is_refused_unread():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(K._LEN.pack(10 << 20))  # says 10 MiB of header follow; none do
        with pytest.raises(K.TransferError, match="over the limit") as err:
            K.recv_message(b, max_header_bytes=LIMITS.max_header_bytes)
    assert err.value.reason == "oversized"


def test_a_check_runs_before_the_payload_is_read():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(K.encode_frame(_kv_header(kv_dtype="int8"), 6144))  # header only
        b.settimeout(5)
        with pytest.raises(K.TransferError, match="this worker holds float32"):
            K.recv_message(b, LIMITS.max_header_bytes, LIMITS.check_kv_header)


def test_threads_left_behind_are_daemons():
    # the link's threads never keep a worker alive past SIGTERM
    server, _, _ = _echo_server(LinkConfig(SECRET))
    server.close()
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("link"))
