"""The torch leaf: a Llama-family Transformer over a paged KV cache, GGUF loading,
tokenizers and the ModelRunner.

Only this package imports torch, gguf and tokenizers. This __init__ re-exports the
torch-free shapes alone, so cost models can `from gpuprobe.llama import resolve_model`
without torch; import gpuprobe.llama.runner for the model itself.
"""

from gpuprobe.llama.config import PRESETS, ModelConfig, resolve_model

__all__ = ["PRESETS", "ModelConfig", "resolve_model"]
