"""What the front needs to know about the model, without torch: its shape, its tokenizer and
how long a context the workers' KV caches hold."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuprobe.errors import UserError


@dataclass(frozen=True)
class FrontModel:
    name: str
    config: object  # gpuprobe.llama.ModelConfig
    tokenizer: object  # gpuprobe.llama.tokenizer.Tokenizer
    num_blocks: int  # KV blocks per worker
    max_context: int  # tokens: prompt + completion
    kv_bytes_per_token: int = 0  # K and V of every layer in the workers' cache dtype

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def max_prompt_bytes(self) -> int:
        """A prompt text longer than this (UTF-8 bytes) cannot fit in max_context tokens, so
        it is refused before it is tokenised."""
        return self.max_context * self.tokenizer.max_token_bytes


def load_front_model(name: str, kv_cache_mb: int, block_size: int, device: str,
                     overrides: dict | None = None) -> FrontModel:
    """Config and tokenizer for `name`; KV capacity from the same budget the workers use."""
    from gpuprobe.llama.config import gguf_path_for, resolve_model
    from gpuprobe.llama.gguf_loader import ModelLoadError
    from gpuprobe.llama.tokenizer import load_tokenizer

    try:
        path = gguf_path_for(name)
        if path is None:
            config = resolve_model(name, **(overrides or {}))
            tokenizer = load_tokenizer(None, config.vocab_size)
        else:
            from gpuprobe.llama.gguf_loader import open_gguf, read_config

            reader = open_gguf(path)
            config = replace(read_config(reader, path, name=name), **(overrides or {}))
            tokenizer = load_tokenizer(reader)
    except (ValueError, ModelLoadError) as exc:
        raise UserError(f"--model {name}: {exc}") from None
    dtype_bytes = 2 if device == "cuda" else 4  # bfloat16 on CUDA, float32 on CPU
    num_blocks = (kv_cache_mb << 20) // (config.kv_bytes_per_token(dtype_bytes) * block_size)
    if num_blocks < 1:
        raise UserError(f"--kv-cache-mb {kv_cache_mb}: too small for one KV block of {name}")
    return FrontModel(name, config, tokenizer, num_blocks,
                      min(config.max_seq_len, num_blocks * block_size),
                      config.kv_bytes_per_token(dtype_bytes))


def freeze_startup_heap() -> int:
    """Put what the front holds from start-up (the tokenizer's vocabulary and merges, the
    model config: ~44k objects for the tiny model) out of the garbage collector's reach, and
    return how many objects that was. Each full collection walked them all: 10-28 ms on this
    VM, during which the front's event loop streams no token to anyone (bench/front_gc_bench.py).
    """
    import gc

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
