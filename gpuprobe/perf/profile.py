"""Build a Profile from measurements: a live server (client-side calibration, plus the server's
step records when it writes them to a store we can read), or stored step records alone.

Client-only (any OpenAI-compatible server): the prefill curve is TTFT vs prompt length, so the
front end is folded into its intercept; the decode curve is the median inter-token gap per
burst. With step records the engine curves come from the steps themselves and the front end
is measured apart: median over prompt sizes of (client TTFT - engine prefill step).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import replace

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.workloads.calibrate import client_decode_points, client_prefill_points
from gpuprobe.perf.costmodel import (DECODE_TERMS, PREFILL_TERMS, Overhead, Profile, StepCost,
                                     kv_link_defaults)
from gpuprobe.perf.fit import least_squares
from gpuprobe.perf.profile_fit import fit_link, fit_worker, recv_fit
from gpuprobe.perf.wake import wake_fields, wake_samples


def worker_key(layout: str, role: str) -> str:
    return "monolithic" if layout == "monolithic" or role == "mixed" else f"{layout}.{role}"


def first_token_role(layout: str) -> str:
    """The role whose worker makes a layout's first tokens: 'mixed' or 'prefill'."""
    return "mixed" if layout == "monolithic" else "prefill"


def from_client(cal: dict, layout: str = "monolithic") -> Profile:
    """Profile of one layout from client-side timings only (see module docstring)."""
    T, ttft = client_prefill_points(cal)
    prefill = least_squares(np.c_[np.ones(len(T)), T, T ** 2], ttft, PREFILL_TERMS, T,
                            "prefill (client TTFT)")
    B, C, tbt = client_decode_points(cal)
    decode = least_squares(np.c_[np.ones(len(B)), B, C], tbt, DECODE_TERMS, B, "decode (client TBT)")
    cost = StepCost(prefill=prefill, decode=decode)
    workers = {worker_key(layout, r): cost for r in (("mixed",) if layout == "monolithic"
                                                     else ("prefill", "decode"))}
    first = worker_key(layout, first_token_role(layout))
    workers[first] = replace(cost, **wake_fields(wake_samples(cal)))  # makes the first tokens
    # Front end folded into the prefill intercept: measured, just not separable.
    return Profile(workers=workers, overhead=Overhead(source="folded into prefill intercept"),
                   name=f"client-{layout}", meta={"source": "client", "layout": layout})


def with_target(profile: Profile, cal: dict, served) -> Profile:
    """A client profile plus what the server told of its model (served_model.ServedModel) and
    the mixed sweep's slowdown of a decode step that a prefill shares (monolithic only: a split
    layout's workers never mix). meta['mixed_step'] says 'measured' or 'assumed'."""
    from gpuprobe.perf.mixed_fit import mixed_factor, mixed_gaps

    workers, mixed = dict(profile.workers), "assumed"
    if "monolithic" in workers and cal.get("mixed"):
        found = mixed_factor(workers["monolithic"], mixed_gaps(cal["mixed"]))
        if found is not None:
            workers["monolithic"] = replace(workers["monolithic"], mixed_factor=found[0],
                                            mixed_source="measured")
            mixed = "measured"
    return replace(profile, workers=workers, kv_bytes_per_token=served.kv_bytes_per_token,
                   meta={**profile.meta, **served.meta(), "mixed_step": mixed})


def from_steps(steps: pd.DataFrame, requests: pd.DataFrame | None = None,
               threads: dict | None = None, link_requests: pd.DataFrame | None = None) -> dict:
    """{'workers': {key: StepCost}, 'links': {layout: Link}} from step (and server request) rows.

    steps need layout and role columns; one worker per (layout, role). link_requests: the rows
    the links are fitted on, when they are more than `requests` (calibration's idle probes).
    """
    if steps.empty:
        raise UserError("no step records to fit (did the server write to this store?)")
    workers = {}
    for (layout, role), grp in steps.groupby(["layout", "role"], dropna=False):
        key = worker_key(str(layout), str(role))
        workers[key] = fit_worker(grp, key, (threads or {}).get(key), requests)
    if requests is not None and len(requests) and "layout" in requests.columns:
        if "cross.decode" in workers:
            r0, r1 = recv_fit(requests[requests["layout"] == "cross"])
            workers["cross.decode"] = replace(workers["cross.decode"], recv_s=r0,
                                              recv_per_token_s=r1)
    links = {}
    handoffs = requests if link_requests is None else link_requests
    if handoffs is not None and len(handoffs) and "layout" in handoffs.columns:
        for layout in ("intra", "cross"):
            dec = workers.get(f"{layout}.decode")  # its admission is charged apart (fit_link)
            link = fit_link(handoffs[handoffs["layout"] == layout],
                            admit=dec.import_fn() if dec is not None else None)
            if link is not None:
                links[layout] = link
    return {"workers": workers, "links": links}


def front_overhead_s(cal: dict, steps: pd.DataFrame) -> float:
    """Median over prompt sizes of client TTFT minus the engine's prefill step for that size."""
    T, ttft = client_prefill_points(cal)
    pre = steps[(steps["num_prefill_tokens"] > 0) & (steps["num_decode_seqs"].fillna(0) == 0)]
    diffs = []
    for n in np.unique(T):
        d = pre.loc[pre["num_prefill_tokens"] == n, "duration_s"]
        if len(d):
            diffs.append(float(np.median(ttft[T == n])) - float(d.median()))
    return float(np.median(diffs)) if diffs else 0.0


def assemble(parts: list[dict], overhead: Overhead, kv_bytes_per_token: int, name: str,
             meta: dict, prefill_share: float = 0.5) -> Profile:
    """Merge per-layout from_steps() results into one Profile."""
    workers, links = {}, dict(kv_link_defaults())
    for p in parts:
        workers.update(p["workers"])
        links.update(p["links"])
    return Profile(workers=workers, links=links, overhead=overhead,
                   kv_bytes_per_token=kv_bytes_per_token, prefill_share=prefill_share,
                   name=name, meta=meta)


def from_store(store, run_id: str | None) -> Profile:
    """Profile from the steps (and server requests) of `run_id` in `store`."""
    steps = store.steps(run_id=run_id)
    if steps.empty:
        raise UserError(f"no step records for run {run_id!r} in {store.path}"
                        if run_id else f"no step records in {store.path}")
    reqs = store.requests(run_id=run_id, source="server")
    part = from_steps(steps, reqs)
    kv = 0
    if len(reqs) and reqs["kv_handoff_bytes"].notna().any():
        r = reqs.dropna(subset=["kv_handoff_bytes"])
        kv = int(np.median(r["kv_handoff_bytes"] / r["prompt_tokens"].clip(lower=1)))
    return assemble([part], Overhead(), kv, f"store-{run_id or 'all'}",
                    {"source": "store", "run_id": run_id})


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` via a temp file in the same folder and a rename: all or nothing."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"{path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".profile-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_profile(path: str) -> Profile:
    import json

    try:
        with open(path) as fh:
            return Profile.from_dict(json.load(fh))
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a gpuprobe profile (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not a gpuprobe profile (not JSON: {exc})") from None
    except ValueError as exc:  # the shape check names the field (profile_shape)
        raise UserError(f"{path}: not a gpuprobe profile: {exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: not a gpuprobe profile ({type(exc).__name__}: {exc})") from None

