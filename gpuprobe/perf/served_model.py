"""What `profile --target` records about the served model besides timings: its name, context
length and KV bytes per token (what a cross layout ships per prompt token; 0 made cross look
free). Torch-free: read from the server's GET /v1/models entry, the model's config.json where
the entry's `root` is reachable on this host (a folder, or the Hugging Face cache), vLLM's
`vllm:cache_config_info` gauge (the bytes and tokens its KV cache holds), or the flags.
"""
from __future__ import annotations

import glob
import json
import os
import re
import urllib.request
from dataclasses import dataclass

from gpuprobe.errors import UserError

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1,
               "fp8": 1, "int8": 1}
_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.M)


@dataclass(frozen=True)
class ServedModel:
    model: str | None
    max_model_len: int | None
    kv_bytes_per_token: int
    kv_source: str  # where kv_bytes_per_token came from, for the profile's meta

    def meta(self) -> dict:
        return {"model": self.model, "max_model_len": self.max_model_len,
                "kv_bytes_per_token_source": self.kv_source}


def hf_config(root: str | None, config_path: str | None = None) -> tuple[dict, str] | None:
    """(config.json as a dict, its path) for a model folder, a config file, or a Hugging Face
    id found in the local hub cache; None when none of them is on this host."""
    candidates = []
    for where in (config_path, root):
        if not where:
            continue
        candidates.append(where if where.endswith(".json") else os.path.join(where, "config.json"))
    if root and "/" in root and not os.path.exists(root):
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
        candidates += sorted(glob.glob(os.path.join(hub, "models--" + root.replace("/", "--"),
                                                    "snapshots", "*", "config.json")))
    for path in candidates:
        try:
            with open(path) as fh:
                cfg = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(cfg, dict):
            return cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg, path
    if config_path:
        raise UserError(f"--model-config {config_path}: no readable config.json there")
    return None


def kv_elements_per_token(cfg: dict) -> int | None:
    """2 x layers x KV heads x head dim: the K and V numbers one token position keeps."""
    try:
        layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return 2 * layers * kv_heads * head_dim


def engine_cache_bytes_per_token(metrics_text: str) -> float | None:
    """vLLM's KV cache bytes / the tokens it holds, from vllm:cache_config_info (0.32 exports
    kv_cache_memory_bytes and kv_cache_size_tokens); None without them."""
    m = _CACHE_INFO.search(metrics_text)
    if m is None:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
    try:
        size, tokens = float(labels["kv_cache_memory_bytes"]), float(labels["kv_cache_size_tokens"])
    except (KeyError, ValueError):
        return None
    return size / tokens if size > 0 and tokens > 0 else None


def _metrics_text(base_url: str) -> str:
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=10) as r:
            return r.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return ""


def kv_bytes(entry: dict, cfg: dict | None, engine_ratio: float | None) -> tuple[int, str] | None:
    """(KV bytes per token, source). The server's own figure first; else the config's shape
    times the element size the engine's cache shows (vLLM may serve a bfloat16 checkpoint in
    float32, as on a CPU), else the config's dtype; else the engine's ratio alone."""
    if isinstance(entry.get("kv_bytes_per_token"), int) and entry["kv_bytes_per_token"] > 0:
        return entry["kv_bytes_per_token"], "server (/v1/models)"
    elements = kv_elements_per_token(cfg) if cfg else None
    if elements and engine_ratio:
        size = min((1, 2, 4), key=lambda b: abs(b * elements - engine_ratio))
        return elements * size, "config.json shape x the element size of vLLM's KV cache"
    if elements:
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "").replace("torch.", "")
        if dtype in DTYPE_BYTES:
            return elements * DTYPE_BYTES[dtype], f"config.json ({dtype})"
    if engine_ratio:
        return round(engine_ratio), "vllm:cache_config_info (cache bytes / tokens)"
    return None


def describe(base_url: str, entry: dict, kv_flag: int | None = None,
             context_flag: int | None = None, config_path: str | None = None) -> ServedModel:
    """The served model, or UserError naming the flag to give where something is not found."""
    found = hf_config(entry.get("root") or entry.get("id"), config_path)
    cfg, cfg_path = found if found else (None, None)
    if kv_flag:
        kv, source = kv_flag, "--kv-bytes-per-token"
    else:
        got = kv_bytes(entry, cfg, engine_cache_bytes_per_token(_metrics_text(base_url)))
        if got is None:
            raise UserError(f"{base_url}: cannot tell the KV bytes per token of "
                            f"{entry.get('id') or 'the served model'} (no config.json reachable, "
                            f"no vLLM cache figures): give --kv-bytes-per-token N "
                            f"(2 x layers x KV heads x head dim x dtype bytes) or --model-config")
        kv, source = got
        if cfg_path and source.startswith("config"):
            source += f": {cfg_path}"
    context = context_flag or entry.get("max_model_len") or (cfg or {}).get("max_position_embeddings")
    if not isinstance(context, int):
        raise UserError(f"{base_url}: the server does not say its context length: give "
                        f"--max-model-len N")
    return ServedModel(entry.get("id"), context, int(kv), source)
