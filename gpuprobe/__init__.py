"""gpuprobe: measure, model and decide how to lay out LLM prefill and decode.

Importing the package is cheap: torch, streamlit and pynvml live in leaf modules that
are imported only by the commands that need them.
"""
__version__ = "0.1.0"

from gpuprobe.errors import GpuprobeError, UserError  # noqa: E402

__all__ = ["__version__", "GpuprobeError", "UserError"]
