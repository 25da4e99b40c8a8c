"""What a worker accepts on its link: the fields of a request and of a KV message, checked
against the model before anything reaches the scheduler or the model runner.

A frame that fails raises TransferError with the reason it is counted under (malformed,
oversized, bad_shape); the link closes that connection. The limits come from the model the
worker loaded: its vocabulary, the context its KV cache holds, and the KV bytes per token, so
no peer can make a worker allocate more than one full context's KV. No torch here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuprobe.server.kv_transfer import TransferError

MAX_ID_CHARS = 200
# Base room of a header besides its token ids: field names, sampling settings, addresses.
HEADER_BASE_BYTES = 64 << 10
BYTES_PER_TOKEN_ID = 8  # ",511" ... ",128255": at most 7 characters, and room to spare
REQUEST_FIELDS = {"rid", "prompt", "max_tokens", "temperature", "top_p", "seed", "ignore_eos",
                  "arrival_s", "stop_token_ids", "decode_addr", "decode_id"}
KV_FIELDS = REQUEST_FIELDS | {"first_token", "handoff_start_s", "kv_format", "kv_dtype",
                              "kv_shape", "kv_bytes", "payload_bytes"}


def _bad(message: str, reason: str = "malformed") -> TransferError:
    return TransferError(message, reason)


def _number(d: dict, name: str, lo: float, hi: float, lo_open: bool = False) -> None:
    v = d.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < lo or v > hi or (lo_open and v == lo):
        raise _bad(f"{name} must be a number in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}")


def _int(d: dict, name: str, lo: int, hi: int, optional: bool = False) -> None:
    v = d.get(name)
    if optional and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")


@dataclass(frozen=True)
class LinkLimits:
    """A worker's model, as far as its link needs it. kv_dims: (layers, kv heads, head dim)."""

    vocab_size: int
    max_context: int  # tokens a sequence may reach: prompt + completion
    kv_dtype: str  # 'float32' | 'bfloat16' ...
    kv_itemsize: int
    kv_dims: tuple[int, int, int]

    @property
    def kv_bytes_per_token(self) -> int:
        layers, heads, dim = self.kv_dims
        return layers * 2 * heads * dim * self.kv_itemsize

    @property
    def max_header_bytes(self) -> int:
        return HEADER_BASE_BYTES + BYTES_PER_TOKEN_ID * self.max_context

    @property
    def max_payload_bytes(self) -> int:
        return self.kv_bytes_per_token * self.max_context

    def check_request(self, d, fields: set[str] = REQUEST_FIELDS) -> dict:
        """A request as the front's ("add", ...) carries it (Tracked.worker_request)."""
        if not isinstance(d, dict):
            raise _bad(f"a request must be an object, got {type(d).__name__}")
        unknown = sorted(k for k in d if k not in fields)
        if unknown:
            raise _bad(f"unknown field {unknown[0]!r}")
        rid = d.get("rid")
        if not isinstance(rid, str) or not 0 < len(rid) <= MAX_ID_CHARS:
            raise _bad(f"rid must be a string of 1-{MAX_ID_CHARS} characters")
        prompt = d.get("prompt")
        if not isinstance(prompt, list) or not 0 < len(prompt) < self.max_context:
            raise _bad(f"prompt must be a list of 1-{self.max_context - 1} token ids")
        if not all(type(t) is int and 0 <= t < self.vocab_size for t in prompt):
            raise _bad(f"prompt token ids must be integers in [0, {self.vocab_size})")
        _int(d, "max_tokens", 1, self.max_context - len(prompt))
        _number(d, "temperature", 0, 2)
        _number(d, "top_p", 0, 1, lo_open=True)
        _int(d, "seed", -(2 ** 63), 2 ** 64 - 1, optional=True)
        if not isinstance(d.get("ignore_eos"), bool):
            raise _bad("ignore_eos must be true or false")
        _number(d, "arrival_s", 0, 1e11)
        stops = d.get("stop_token_ids", [])
        if not isinstance(stops, list) or len(stops) > 64 or not all(
                type(t) is int and 0 <= t < self.vocab_size for t in stops):
            raise _bad("stop_token_ids must be a list of at most 64 token ids")
        for name in ("decode_addr", "decode_id"):
            if d.get(name) is not None and not (isinstance(d[name], str)
                                                and len(d[name]) <= MAX_ID_CHARS):
                raise _bad(f"{name} must be a string of at most {MAX_ID_CHARS} characters")
        return d

    def check_kv_header(self, h) -> None:
        """A KV message's header, before its payload is read: the request, its first token,
        and a raw tensor of exactly this model's KV for the prompt's positions."""
        self.check_request(h, KV_FIELDS)
        _int(h, "first_token", 0, self.vocab_size - 1)
        _number(h, "handoff_start_s", 0, 1e11)
        if h.get("kv_format") != "raw":
            raise _bad(f"kv_format must be 'raw', got {h.get('kv_format')!r}", "bad_shape")
        if h.get("kv_dtype") != self.kv_dtype:
            raise _bad(f"kv_dtype {h.get('kv_dtype')!r}: this worker holds {self.kv_dtype}",
                       "bad_shape")
        layers, heads, dim = self.kv_dims
        want = [layers, 2, len(h["prompt"]), heads, dim]
        if h.get("kv_shape") != want:
            raise _bad(f"kv_shape {h.get('kv_shape')!r}: this model's KV for "
                       f"{len(h['prompt'])} prompt tokens is {want}", "bad_shape")
        size = h.get("payload_bytes")
        if size > self.max_payload_bytes:
            raise _bad(f"payload of {size} bytes is over one full context's KV "
                       f"({self.max_payload_bytes})", "oversized")
        if size != math.prod(want) * self.kv_itemsize:
            raise _bad(f"payload_bytes {size} does not match kv_shape {want}", "bad_shape")


def limits_of(config, dtype_name: str, itemsize: int, max_context: int) -> LinkLimits:
    """LinkLimits of a loaded model (a gpuprobe.llama ModelConfig)."""
    return LinkLimits(vocab_size=config.vocab_size, max_context=max_context,
                      kv_dtype=dtype_name, kv_itemsize=itemsize,
                      kv_dims=(config.n_layers, config.n_kv_heads, config.head_dim))
