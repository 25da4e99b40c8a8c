"""Step times from measured silicon data: AIConfigurator's kernel timings (aiconfigurator-core,
the optional extra `gpuprobe[silicon]`), the only module that imports it.

AIConfigurator ships, per GPU ("system": h200_sxm, h100_sxm, ...), engine and engine version,
tables of kernel latencies measured on that GPU: GEMMs (m x n x k by dtype), context and
generation attention (batch, sequence, heads), custom/NCCL all-reduce (devices, message
size), and formulas for the element-wise ops it did not measure. Its compiled engine reads a
table at the shape asked, interpolating between the shapes collected.

gpuprobe lists the operations of one Llama forward pass at its own model shapes, split over
`tp` devices as vLLM shards them (attention heads, FFN width and vocabulary split tp ways,
KV heads too until there are fewer than devices; two all-reduces per layer and one after the
embedding), has AIConfigurator price each on the named GPU/engine/version, and sums them:

    prefill step of T tokens (one prompt)     context ops at batch 1, sequence T (the
                                              logits GEMM for the last token only)
    decode step of B sequences at context c   generation ops at batch B, sequence c

compose() returns those step times on a grid of sizes (DataFrames, seconds), with the share of
each step's time that came from measured tables (the rest from AIConfigurator's formulas).
silicon_profile.py fits gpuprobe's StepCost form to them.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import pandas as pd

from gpuprobe.perf.specs import GpuSpec, ModelShape

ENGINES = ("vllm", "sglang", "trtllm")
PREFILL_TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_CONTEXTS = (128, 512, 1024, 2048, 4096, 8192)


class Unavailable(Exception):
    """No silicon data for what was asked (extra not installed, GPU or engine not covered);
    the message says which, for the roofline fallback to carry."""


@dataclass(frozen=True)
class SiliconData:
    """Which measured data a profile's curves come from."""

    system: str      # AIConfigurator's GPU name, e.g. h200_sxm
    engine: str      # vllm, sglang or trtllm
    version: str     # the engine version the kernels were timed under


def available() -> str | None:
    """None when aiconfigurator-core imports, else why not (one line)."""
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        return "aiconfigurator-core is not installed (pip install 'gpuprobe[silicon]')"
    return None


def open_data(system: str, engine: str, version: str | None = None) -> SiliconData:
    """The data for `system` + `engine` (its newest version unless `version`); Unavailable
    when there is none."""
    why = available()
    if why:
        raise Unavailable(why)
    if engine not in ENGINES:
        raise Unavailable(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    asked = f"{engine} {version}" if version else engine
    with _quiet():
        version = version or _latest_version(system, engine)
        if not version or _database(system, engine, version) is None:
            raise Unavailable(f"AIConfigurator {_core_version()} has no {asked} data for "
                              f"{system}")
    return SiliconData(system, engine, version)


def system_gpu(system: str) -> GpuSpec:
    """A GpuSpec from AIConfigurator's system file (for GPUs gpuprobe's table lacks)."""
    why = available()
    if why:
        raise Unavailable(why)
    from aiconfigurator_core.sdk import perf_database

    try:
        spec = perf_database.load_system_spec(system)
    except Exception as exc:  # its loader raises several kinds for a missing file
        raise Unavailable(f"AIConfigurator has no system {system!r} ({exc})") from None
    g, node = spec["gpu"], spec["node"]
    return GpuSpec(system, float(g["bfloat16_tc_flops"]), float(g["mem_bw"]),
                   float(node["intra_node_bw"]), float(g["mem_capacity"]), system)


def compose(shape: ModelShape, data: SiliconData, tp: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(prefill, decode) step times of `shape` on a worker of `tp` devices.

    prefill: prompt_tokens, step_s, measured_share, allreduce_s (one prompt per step);
    decode: batch, context_tokens, step_s, measured_share, allreduce_s."""
    db, handle = _database(data.system, data.engine, data.version)
    with _quiet():  # the engine loads its tables on first use
        ctx, gen = _ops_json(shape, tp, db, True), _ops_json(shape, tp, db, False)
        pre = [_step(handle, ctx, True, 1, t) | {"prompt_tokens": t} for t in PREFILL_TOKENS]
        dec = [_step(handle, gen, False, b, c) | {"batch": b, "context_tokens": c}
               for b in DECODE_BATCHES for c in DECODE_CONTEXTS]
    return pd.DataFrame(pre), pd.DataFrame(dec)


def _step(handle, ops_json: str, is_context: bool, batch: int, seq: int) -> dict:
    rows = handle.evaluate_ops_json(ops_json, is_context=is_context, batch_size=batch, s=seq)
    total_ms = sum(r[1] for r in rows)
    measured_ms = sum(r[1] for r in rows if r[3] == "silicon")
    ar_ms = sum(r[1] for r in rows if r[0].endswith("_ar"))
    return {"step_s": total_ms / 1e3, "measured_share": measured_ms / total_ms if total_ms else 0.0,
            "allreduce_s": ar_ms / 1e3}


def _ops_json(shape: ModelShape, tp: int, db, context: bool) -> str:
    """One forward pass's operations at `shape` over `tp` devices, as AIConfigurator's op
    specs (JSON). Names follow its Llama model's, which its engine keys rules on (the context
    logits GEMM runs for the last token only)."""
    import aiconfigurator_core.sdk.operations as ops
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.engine import _resolve_attention_lane_orders, build_ops_json

    p = "context_" if context else "generation_"
    bf16 = common.GEMMQuantMode.bfloat16
    kv_cache, fmha = common.KVCacheQuantMode.bfloat16, common.FMHAQuantMode.bfloat16
    L, h, hd = shape.layers, shape.dim, shape.head_dim
    heads, kv_heads = shape.n_heads // tp, shape.kv_heads_per_device(tp)
    ffn, vocab = shape.hidden_dim // tp, shape.vocab_size // tp
    attention = (ops.ContextAttention(p + "attention", L, heads, kv_heads, kv_cache, fmha,
                                      head_size=hd)
                 if context else
                 ops.GenerationAttention(p + "attention", L, heads, kv_heads, kv_cache, head_size=hd))
    graph = [
        ops.Embedding(p + "embedding", 1, vocab, h, 0.3),
        ops.ElementWise(p + "add_norm_1", L, 2 * h, 2 * h, 0.8),
        ops.GEMM(p + "qkv_gemm", L, heads * hd + 2 * kv_heads * hd, h, bf16),
        attention,
        ops.GEMM(p + "proj_gemm", L, h, heads * hd, bf16, low_precision_input=True),
        ops.ElementWise(p + "add_norm_2", L, 2 * h, 2 * h, 0.8),
        ops.GEMM(p + "gate_ffn1_gemm", L, 2 * ffn, h, bf16),
        ops.ElementWise(p + "act_gate", L, 2 * ffn, ffn, 0.8),
        ops.GEMM(p + "ffn2_gemm", L, h, ffn, bf16, low_precision_input=True),
        ops.GEMM(p + "logits_gemm", 1, vocab, h, bf16),
        # tp 1: AIConfigurator prices it at 0
        ops.CustomAllReduce(p + "embedding_ar", 1, h, tp),
        ops.CustomAllReduce(p + "layers_ar", 2 * L, h, tp),
    ]
    _resolve_attention_lane_orders(graph, db, None)  # the engine's kernel choice per table
    return build_ops_json(graph)


@functools.lru_cache(maxsize=32)
def _latest_version(system: str, engine: str) -> str | None:
    from aiconfigurator_core.sdk import perf_database

    try:
        return perf_database.get_latest_database_version(system, engine)
    except Exception:  # no folder for this system: no data
        return None


@functools.lru_cache(maxsize=8)
def _database(system: str, engine: str, version: str):
    """(AIConfigurator's PerfDatabase, an engine handle over its tables); None when it has
    no such data. Loaded once per process (a second or two)."""
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle

    with _quiet():
        try:
            db = perf_database.get_database(system, engine, version)
        except Exception:  # a system without files for this engine raises in several ways
            return None
        return None if db is None else (db, EngineHandle.for_database(db))


def _core_version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator-core")


class _quiet:
    """AIConfigurator logs a warning per table it fills from another engine's rows; those
    tables (MLA, DSA) are not a Llama's, so its loading is kept off the user's terminal."""

    def __enter__(self):
        self._log = logging.getLogger("aiconfigurator_core")
        self._level = self._log.level
        self._log.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self._log.setLevel(self._level)
