"""What every page shares: the store (opened read-only once per process), the data version that
keys every cache, and the "what is missing, and the command that fills it" line.

Reads go through `cached(queries.fn, *args)`: results are kept by Streamlit's cache under the
store's path and data version, so a page redrawn with no new data reads nothing, and any new row (a
sample, a request, a recommendation) invalidates every cached read at once.
"""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from gpuprobe.store import Store
from gpuprobe.store.reads import data_version

STORE_ENV = "GPUPROBE_STORE"  # `gpuprobe dashboard --store PATH` sets it for the app process


def store_path() -> str:
    return str(Path(os.environ.get(STORE_ENV, "gpuprobe.db")).resolve())


@st.cache_resource(show_spinner=False)
def _open(path: str) -> Store | None:
    try:
        return Store.open(path, read_only=True)
    except Exception:  # noqa: BLE001 - shown by require_store as one line
        return None


def store() -> Store | None:
    return _open(store_path())


def require_store() -> Store:
    """The store, or a one-line error naming the file and how to make one (stops the page)."""
    s = store()
    if s is None:
        _open.clear()  # try again on the next run: the file may appear
        st.error(f"No gpuprobe store at {store_path()}. Make one with `gpuprobe demo` "
                 f"(.demo/gpuprobe.db) or `gpuprobe import TRACE`, then "
                 f"`gpuprobe dashboard --store PATH`.")
        st.stop()
    return s


def version() -> tuple:
    return data_version(require_store())


@st.cache_data(show_spinner=False, max_entries=256)
def _cached(path: str, ver: tuple, name: str, args: tuple, _fn):
    # _fn is left out of the cache key (Streamlit skips parameters named with a leading
    # underscore); its qualified name stands for it.
    return _fn(_open(path), *args)


def cached(fn, *args):
    """fn(store, *args) (a function of dashboard/queries.py), cached until the store gains data."""
    require_store()
    return _cached(store_path(), version(), f"{fn.__module__}.{fn.__qualname__}", args, fn)


MAX_POINTS = 2000  # a series' points at most, downsampled inside the store
ROLLUP_FROM_S = 1800.0  # windows this long read the store's 10 s rollup: an hour of 8 GPUs at
# 10 Hz is 1.7M raw rows to aggregate (3.4 s on the loaded 2-core VM), 17,000 rollup rows


def window_points(span: tuple[float, float], width_s: float | None) -> tuple[float, float, int]:
    """(start, end, max_points) of the window of `width_s` (None: all) ending at the newest data."""
    first, last = span
    start = first if width_s is None else max(first, last - width_s)
    end = max(last, start + 1.0)
    points = MAX_POINTS if end - start < ROLLUP_FROM_S else min(MAX_POINTS, int((end - start) / 10.0))
    return start, end, points


def missing(what: str, command: str) -> None:
    """The line a page shows instead of a chart: what is missing, and what fills it."""
    st.info(f"{what} Fill it with: `{command}`")


def local_time(ts_s, fmt: str = "%Y-%m-%d %H:%M:%S %Z") -> str:
    """Epoch seconds as this machine's local time (with its zone), '' for none."""
    import time
    if ts_s is None or ts_s != ts_s:
        return ""
    return time.strftime(fmt, time.localtime(float(ts_s)))


def fmt_ms(v) -> str:
    return "n/a" if v is None or v != v else f"{v * 1000:,.1f} ms"


def fmt_pct(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.1%}"
