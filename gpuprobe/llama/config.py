"""Model shapes: named presets and GGUF checkpoints. Torch-free, so cost models can read it."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-family decoder's shape.

    gguf_path: weights come from this GGUF file; None means random weights drawn from `seed`.
    """

    name: str
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tie_embeddings: bool = False
    gguf_path: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: dim {self.dim}, n_heads {self.n_heads} and "
                             f"n_kv_heads {self.n_kv_heads} do not divide evenly")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def num_params(self) -> int:
        """Parameter count from the shapes (embedding counted once when tied)."""
        kv_dim = self.n_kv_heads * self.head_dim
        attn = self.dim * (2 * self.dim + 2 * kv_dim)
        ffn = 3 * self.dim * self.hidden_dim
        per_layer = attn + ffn + 2 * self.dim
        embed = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
        return self.n_layers * per_layer + embed + self.dim

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one token position takes across all layers (K and V)."""
        return self.n_layers * 2 * self.n_kv_heads * self.head_dim * dtype_bytes


PRESETS: dict[str, ModelConfig] = {
    # Small enough that a batch-64 decode step takes a few ms on 2 CPU cores.
    "tiny": ModelConfig(name="tiny", vocab_size=512, dim=128, n_layers=4, n_heads=4,
                        n_kv_heads=2, hidden_dim=384, max_seq_len=2048,
                        bos_token_id=256, eos_token_id=257),
    # Llama-3-8B's shape with random weights: for GPU timing, never for CPU tests.
    "llama3-8b-shape": ModelConfig(name="llama3-8b-shape", vocab_size=128256, dim=4096,
                                   n_layers=32, n_heads=32, n_kv_heads=8, hidden_dim=14336,
                                   rope_theta=500000.0, max_seq_len=8192,
                                   bos_token_id=128000, eos_token_id=128009),
    # Llama-3-70B's shape (Meta's config.json): for cost models and memory fits; its weights
    # (141 GB in bf16) fit no single GPU, so it is never instantiated here.
    "llama3-70b-shape": ModelConfig(name="llama3-70b-shape", vocab_size=128256, dim=8192,
                                    n_layers=80, n_heads=64, n_kv_heads=8, hidden_dim=28672,
                                    rope_theta=500000.0, max_seq_len=8192,
                                    bos_token_id=128000, eos_token_id=128009),
}
GGUF_MODELS = ("smollm2-135m",)


def gguf_path_for(name_or_path: str) -> str | None:
    """The GGUF file behind a model name or path; None for random-weight presets."""
    if name_or_path in PRESETS:
        return None
    if name_or_path in GGUF_MODELS:
        from gpuprobe.llama.gguf_loader import smollm2_path

        return smollm2_path()
    if os.path.isfile(name_or_path):
        return name_or_path
    known = ", ".join([*PRESETS, *GGUF_MODELS])
    raise ValueError(f"unknown model {name_or_path!r}: not one of {known} "
                     f"and not an existing GGUF file")


def resolve_model(name_or_path: str, **overrides) -> ModelConfig:
    """A preset name, 'smollm2-135m', or a path to a local Llama GGUF file -> ModelConfig.

    overrides replace fields, e.g. n_layers=2 for a smoke test of a big shape.
    """
    path = gguf_path_for(name_or_path)
    if path is None:
        config = PRESETS[name_or_path]
    else:
        from gpuprobe.llama.gguf_loader import open_gguf, read_config  # numpy + gguf only here

        config = read_config(open_gguf(path), path, name=name_or_path)
    return replace(config, **overrides) if overrides else config
