"""Get a workload DataFrame from a name in the store or from a trace file (imported on the fly
into a throw-away store, so the file gets the same checks as `gpuprobe import`)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from gpuprobe.errors import UserError


def load_workload(store, name_or_file: str) -> pd.DataFrame:
    """Workload columns (see Store.workload); raises UserError if neither a name nor a file."""
    if store.workload_id(name_or_file) is not None:
        return store.workload(name_or_file)
    path = Path(name_or_file)
    if not path.is_file():
        raise UserError(f"{name_or_file!r} is neither a workload in the store nor a trace file "
                        f"(see gpuprobe workloads list)")
    from gpuprobe.store import Store
    from gpuprobe.workloads.pipeline import import_trace
    with tempfile.TemporaryDirectory() as tmp:
        with Store.open(Path(tmp) / "scratch.db") as scratch:
            import_trace(scratch, path, "file")
            return scratch.workload("file")


def bundled_trace(name: str) -> Path | None:
    """'azure-conv' / 'azure-code' -> the bundled Azure 2023 CSV, else None."""
    alias = {"azure-conv": "azure_llm_2023_conv.csv", "azure-code": "azure_llm_2023_code.csv"}
    if name not in alias:
        return None
    return Path(__file__).resolve().parent.parent / "data" / alias[name]


def lengths_source(store, name: str) -> pd.DataFrame:
    """Lengths to resample from: a stored workload, a bundled trace (azure-conv, azure-code) or a file."""
    if store.workload_id(name) is None and bundled_trace(name) is not None:
        return load_workload(store, str(bundled_trace(name)))
    return load_workload(store, name)
