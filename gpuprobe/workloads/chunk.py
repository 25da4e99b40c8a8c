"""A chunk of parsed requests: a dict of equal-length numpy arrays.

Keys: line (file line, int64), arrival_s (float64, seconds on the trace's own clock),
prompt_tokens, output_tokens (int64), and the optional text columns model, log_type,
session_id, hash_ids (object arrays; hash_ids is JSON text of a list of block hashes).
"""
from __future__ import annotations

import numpy as np

from gpuprobe.errors import UserError

OPTIONAL = ("model", "log_type", "session_id", "hash_ids")
KEYS = ("line", "arrival_s", "prompt_tokens", "output_tokens") + OPTIONAL


def make_chunk(lines, arrival_s, prompt_tokens, output_tokens, ok=None, **optional) -> dict:
    n = len(lines)
    chunk = {"line": np.asarray(lines, dtype=np.int64), "arrival_s": np.asarray(arrival_s, dtype=np.float64),
             "prompt_tokens": np.asarray(prompt_tokens, dtype=np.int64),
             "output_tokens": np.asarray(output_tokens, dtype=np.int64)}
    for key in OPTIONAL:
        val = optional.get(key)
        chunk[key] = np.full(n, None, dtype=object) if val is None else np.asarray(val, dtype=object)
    return take(chunk, ok) if ok is not None and not ok.all() else chunk


def take(chunk: dict, index) -> dict:
    return {k: v[index] for k, v in chunk.items()}


def concat(a: dict | None, b: dict) -> dict:
    return b if a is None else {k: np.concatenate([a[k], b[k]]) for k in KEYS}


def size(chunk: dict | None) -> int:
    return 0 if chunk is None else len(chunk["line"])


def find_columns(header: list[str], wanted: dict[str, str], path, optional: dict[str, str] | None = None
                 ) -> dict[str, str]:
    """Map our keys to the header's spelling (case-insensitive). `wanted` are required."""
    by_lower = {h.lower(): h for h in header}
    found = {}
    for key, col in {**wanted, **(optional or {})}.items():
        if col.lower() in by_lower:
            found[key] = by_lower[col.lower()]
        elif key in wanted:
            raise UserError(f"{path}: missing column {col!r} (columns found: {', '.join(header)[:200]})")
    return found
