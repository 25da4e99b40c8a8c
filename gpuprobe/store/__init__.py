"""The embedded SQLite store (see store.py)."""
from gpuprobe.store.samples import Sample
from gpuprobe.store.store import Store

__all__ = ["Sample", "Store"]
