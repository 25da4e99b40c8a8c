"""The model leaf: a Llama-family Transformer over a paged KV cache, GGUF loading,
tokenizers and the ModelRunner.

Only this package imports torch, gguf and tokenizers. This __init__ re-exports the
torch-free shapes alone, so cost models can `from gpuprobe.model import resolve_model`
without torch; import gpuprobe.model.runner for the model itself.
"""

from gpuprobe.model.config import PRESETS, ModelConfig, resolve_model

__all__ = ["PRESETS", "ModelConfig", "resolve_model"]
