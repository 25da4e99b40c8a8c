"""Get a workload DataFrame from a name in the store, a bundled trace alias (azure-conv,
azure-code) or a trace file (imported on the fly into a throw-away store, so the file gets the
same checks as `gpuprobe import`).

A workload frame is sorted by arrival where it is loaded or prepared (`by_arrival`,
`as_workload`), once; what takes it from there (scaling, forecasts, the simulator) relies on
that order instead of sorting again.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from gpuprobe.errors import UserError


def load_workload(store, name_or_file: str) -> pd.DataFrame:
    """Workload columns (see Store.workload). A stored name wins over a bundled alias; raises
    UserError if it is neither a name, an alias nor a file. `store` may be None (no store)."""
    if store is not None and store.workload_id(name_or_file) is not None:
        return by_arrival(store.workload(name_or_file))
    path = bundled_trace(name_or_file) or Path(name_or_file)
    if not path.is_file():
        raise UserError(f"{name_or_file!r} is neither a workload in the store nor a trace file "
                        f"(see gpuprobe workloads list)")
    from gpuprobe.store import Store
    from gpuprobe.workloads.pipeline import ImportOptions, import_trace
    with tempfile.TemporaryDirectory() as tmp:
        with Store.open(Path(tmp) / "scratch.db") as scratch:
            import_trace(scratch, path, "file", opts=ImportOptions(skip_bad_hint=False))
            return by_arrival(scratch.workload("file"))


def read_workload(store_path, name_or_file: str) -> pd.DataFrame:
    """load_workload for commands that only read: the store is opened, never created, and is
    not needed for a bundled alias or a trace file."""
    from gpuprobe.store import Store
    from gpuprobe.store.connection import resolve_path
    path = resolve_path(store_path)
    if path.exists():
        with Store.open(path, create=False) as store:
            return load_workload(store, name_or_file)
    if not (bundled_trace(name_or_file) or Path(name_or_file)).is_file():
        raise UserError(f"{name_or_file!r} is neither a bundled trace nor a trace file, and there is no "
                        f"store at {path}")
    return load_workload(None, name_or_file)


def load_named_workload(store_path, name: str) -> pd.DataFrame:
    """read_workload, and UserError when it holds no request (what recommend, simulate and
    validate take as --workload)."""
    wl = read_workload(store_path, name)  # reads only: a mistyped --store is not created
    if wl.empty:
        raise UserError(f"workload {name!r} is empty: it has no requests")
    return wl


def by_arrival(df: pd.DataFrame) -> pd.DataFrame:
    """`df` in arrival order (stable), the index reset; `df` itself when it already is."""
    if df["arrival_s"].is_monotonic_increasing and isinstance(df.index, pd.RangeIndex) \
            and df.index.start == 0 and df.index.step == 1:
        return df
    out = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def as_workload(df: pd.DataFrame) -> pd.DataFrame:
    """A frame a decision or a simulation can take: by arrival, the clock from 0. UserError
    when it is empty or lacks arrival_s, prompt_tokens or output_tokens."""
    missing = [c for c in ("arrival_s", "prompt_tokens", "output_tokens") if c not in df.columns]
    if missing:
        raise UserError(f"workload lacks column(s) {', '.join(missing)}")
    if df.empty:
        raise UserError("workload is empty: it has no requests")
    wl = by_arrival(df)
    if wl["arrival_s"].iloc[0] != 0:
        wl = wl.assign(arrival_s=wl["arrival_s"] - wl["arrival_s"].iloc[0])
        wl.attrs = dict(df.attrs)
    return wl


def bundled_trace(name: str) -> Path | None:
    """'azure-conv' / 'azure-code' -> the bundled Azure 2023 CSV, else None."""
    alias = {"azure-conv": "azure_llm_2023_conv.csv", "azure-code": "azure_llm_2023_code.csv"}
    if name not in alias:
        return None
    return Path(__file__).resolve().parent.parent / "data" / alias[name]
