"""Trace format detection and the importer for each format.

auto looks at the first bytes (SQLite store), the CSV header or the first JSON line:
  azure     CSV with TIMESTAMP, ContextTokens, GeneratedTokens
  burstgpt  CSV with Timestamp, Request tokens, Response tokens
  mooncake  JSONL with timestamp, input_length, output_length
  recorded  a gpuprobe store file, or CSV/JSONL with arrival_s, prompt_tokens, output_tokens
  csv       CSV/JSONL with timestamp, prompt_tokens, output_tokens (gpuprobe's own names), or any
            columns named with --map
"""
from __future__ import annotations

import importlib

from gpuprobe.errors import UserError
from gpuprobe.workloads.readers import csv_header, first_json_object

FORMATS = ("azure", "burstgpt", "mooncake", "recorded", "csv")
_ALIASES = {"generic": "csv", "jsonl": "csv", "store": "recorded"}
_MODULES = {"azure": "azure", "burstgpt": "burstgpt", "mooncake": "mooncake", "recorded": "recorded",
            "csv": "generic"}
_SIGNATURES = (("azure", {"timestamp", "contexttokens", "generatedtokens"}),
               ("burstgpt", {"timestamp", "request tokens", "response tokens"}),
               ("mooncake", {"timestamp", "input_length", "output_length"}),
               ("recorded", {"arrival_s", "prompt_tokens", "output_tokens"}),
               ("csv", {"timestamp", "prompt_tokens", "output_tokens"}))


def importer(fmt: str):
    """The importer module for a format name (aliases allowed)."""
    fmt = _ALIASES.get(fmt, fmt)
    if fmt not in _MODULES:
        raise UserError(f"--format: {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    return importlib.import_module(f"gpuprobe.workloads.importers.{_MODULES[fmt]}")


def canonical(fmt: str) -> str:
    return _ALIASES.get(fmt, fmt)


def detect(path, has_map: bool = False) -> str:
    """Guess the format of `path`; raise a UserError naming the formats tried."""
    from gpuprobe.workloads.importers.recorded import is_sqlite
    if is_sqlite(path):
        return "recorded"
    if has_map:
        return "csv"
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
    if head[:1] == b"{":
        obj = first_json_object(path) or {}
        keys = {str(k).lower() for k in obj}
    else:
        keys = {h.lower() for h in (csv_header(path) or [])}
    for fmt, needed in _SIGNATURES:
        if needed <= keys:
            return fmt
    shown = ", ".join(sorted(keys))[:160] or "none"
    raise UserError(f"{path}: unknown trace format (tried azure, burstgpt, mooncake, recorded, and columns "
                    f"timestamp, prompt_tokens, output_tokens; columns found: {shown}): rename the columns "
                    f"to those three, or `gpuprobe import {path} --format csv --map timestamp=COL,"
                    f"prompt_tokens=COL,output_tokens=COL --name NAME` and use NAME")
