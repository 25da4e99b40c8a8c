"""Hostile connections to a worker's link port, one kind at a time, and the reason the worker
counts each under (gpuprobe_link_refused_total{reason}). A helper of test_cross_remote.py."""
from __future__ import annotations

import random
import socket

from gpuprobe.server import kv_transfer as K
from gpuprobe.server.link_auth import MAGIC, LinkConfig, LinkRefused, connect

KV_BYTES_PER_TOKEN = 4 * 2 * 2 * 32 * 4  # tiny: layers x (K, V) x kv heads x head dim x fp32


def tiny_kv_header(n: int, **change) -> dict:
    h = {"rid": "fuzz", "prompt": list(range(1, n + 1)), "max_tokens": 4, "temperature": 0,
         "top_p": 1.0, "seed": None, "ignore_eos": True, "arrival_s": 1.0, "first_token": 5,
         "handoff_start_s": 1.0, "kv_format": "raw", "kv_dtype": "float32",
         "kv_shape": [4, 2, n, 2, 32], "kv_bytes": n * KV_BYTES_PER_TOKEN}
    return {**h, **change}


def hostile(kind: str, addr, secret: bytes, rng: random.Random) -> None:
    good = LinkConfig(secret)
    try:
        if kind in ("no_secret_handshake", "wrong_secret"):
            connect(addr, LinkConfig(b"" if kind == "no_secret_handshake" else b"x" * 32), "kv")
            return
        if kind in ("no_secret_frame", "garbage", "truncated_handshake"):
            with socket.create_connection(addr, timeout=10) as s:
                s.recv(64)
                if kind == "no_secret_frame":  # what the link took before it had a handshake
                    s.sendall(K.encode_frame(tiny_kv_header(4), 4 * KV_BYTES_PER_TOKEN))
                elif kind == "garbage":
                    s.sendall(bytes([0x47 ^ 0xFF]) + rng.randbytes(rng.randint(8, 300)))
                else:  # then hang up mid-way
                    s.sendall(MAGIC + b"K" + rng.randbytes(rng.randint(0, 60)))
                    return
                s.recv(64)
            return
        with connect(addr, good, "control" if kind == "bad_control" else "kv") as s:
            n = rng.randint(1, 40)
            if kind == "truncated_frame":  # then hang up mid-way
                s.sendall(K.encode_frame(tiny_kv_header(n), n * KV_BYTES_PER_TOKEN) + b"\0" * 99)
                return
            if kind == "oversized_header":
                s.sendall(K._LEN.pack(1 << 30) + rng.randbytes(64))
            elif kind == "oversized_payload":
                s.sendall(K.encode_frame(tiny_kv_header(n), 1 << 40))
            elif kind == "wrong_shape":
                s.sendall(K.encode_frame(tiny_kv_header(n, kv_shape=[4, 2, n, 4, 16]),
                                         n * KV_BYTES_PER_TOKEN))
            elif kind == "garbage_frame":
                s.sendall(K._LEN.pack(64) + b"\xff" + rng.randbytes(63))
            elif kind == "bad_control":
                s.sendall(K.encode_frame({"msg": ["add", {"rid": 1}]}))
            s.recv(64)
    except (OSError, LinkRefused):
        pass  # the worker hung up on us: that is the point


EXPECTED = {"no_secret_frame": "no_handshake", "no_secret_handshake": "bad_proof",
            "wrong_secret": "bad_proof", "truncated_handshake": "truncated",
            "truncated_frame": "truncated", "oversized_header": "oversized",
            "oversized_payload": "oversized", "wrong_shape": "bad_shape",
            "garbage": "no_handshake", "garbage_frame": "malformed", "bad_control": "malformed"}
