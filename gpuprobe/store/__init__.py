"""The embedded SQLite store (see store.py)."""
from gpuprobe.store.samples import Sample, label_dict
from gpuprobe.store.store import Store

__all__ = ["Sample", "Store", "label_dict"]
