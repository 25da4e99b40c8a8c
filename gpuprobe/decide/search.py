"""The candidate search: every candidate's goodput, with as few simulator runs as it needs.

All candidates are searched on one sample of the workload: every k-th request with its clock
compressed k times (thinned()), about SEARCH_REQUESTS of them: the same rate, the same mix,
the same swings over the trace, k times shorter. A full hour of trace at the rates that
saturate a monolithic worker is ~10 s of simulation per run (every step a mixed one); the
sample keeps a 20-candidate search within seconds, and every candidate's figure comes from
the same requests, so the ranking compares like with like.

Each search starts from the previous candidate's answer when that is a neighbour of the same
layout, else from the best so far (a similar candidate's goodput is the best first guess) and stops at a bracket FINE_PRECISION wide, or 1.5x wide once it lies wholly
below the best so far's tie band (that candidate cannot win; its row shows the bracket). Every run first simulates the first
quarter of its requests: when these alone already miss the SLO more often than the whole run
may, the rate fails without the rest (an overloaded run is the slowest kind, and later
arrivals only add load to earlier requests). offered() then adds the figures at the
workload's own rate, spread over the deployment's devices, on the whole workload.

A short workload (a slice of tens of requests) caps the search: past some rate it is one
burst (`capped`), and candidates that reach that rate all read the same goodput, a tie made
by the workload, not by the layouts. decide_top() then searches the capped candidates again
on the workload repeated 2, 4, 8 ... times (the same rate and mix, k times as long) until the
first candidate is no longer capped or nothing comes within the tie band of it; a row still
capped shows its goodput as a lower bound (">= X").
"""
from __future__ import annotations

import time
from typing import Callable

import pandas as pd

from gpuprobe.decide.goodput import Bracket, search
from gpuprobe.decide.predict import predict
from gpuprobe.decide.rank import GOODPUT_TOLERANCE, rank
from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.metrics import Slo

SEARCH_REQUESTS = 600
# A finite workload squeezed into less than this many typical request durations is one burst
# that a big enough batch serves whole: no steady state, no goodput to read off it. The search
# stops there, and the row says the workload, not the candidate, set its limit (`capped`).
STEADY = 3.0
FINE_PRECISION = 1.1
MAX_REPEATS = 64  # a 40-request slice repeated up to 2,560 requests
# A bound is a steady state's; a finite sample can run a few percent past it for a while
# (an overload the TTFT and TPOT slack absorbs within the sample: 1.04x seen), so a
# candidate is skipped only when its bound clears the best so far's tie band by this much.
BOUND_SLACK = 1.15
SHOWN = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
         "tbt_p50_s", "tbt_p99_s", "slo_attainment",
         "throughput_tok_s", "offered_goodput_rps_per_device", "num_requests", "num_completed")


def base_rate(workload: pd.DataFrame) -> float:
    """The workload's mean rate, requests/s (its span at least a second: a burst of requests
    at one instant is taken as arriving within one)."""
    span = float(workload["arrival_s"].iloc[-1] - workload["arrival_s"].iloc[0])
    return len(workload) / max(span, 1.0)


def thinned(workload: pd.DataFrame, target: int = SEARCH_REQUESTS) -> pd.DataFrame:
    """Every k-th request with the clock divided by k: the same rate and mix, k times shorter."""
    k = max(1, len(workload) // target)
    if k == 1:
        return workload
    part = workload.iloc[::k]
    return part.assign(arrival_s=part["arrival_s"].to_numpy() / k)


def search_candidates(workload: pd.DataFrame, profile: Profile, cands: list, slo: Slo,
                      progress: Callable[[str], None] | None = None,
                      seed: int | None = 0, sample: int = SEARCH_REQUESTS,
                      limits: dict | None = None,
                      bound: Callable[[object], float] | None = None,
                      hints: dict | None = None) -> list[dict]:
    """One row per candidate (see _row), in the order given. workload: sorted, arrival_s from
    0. progress: called with a line per candidate. limits: the workers' max_num_seqs and
    num_blocks (predict()). bound: a candidate's goodput per device it cannot exceed
    (decide/bounds.py); with it the candidates are searched highest bound first, each starts
    from its bound times what the searched ones achieved of theirs, and one whose bound lies
    below the best so far's tie band is not simulated (its row says `pruned`). hints: a
    first guess per candidate label (goodput per device), where one is known."""
    say = progress or (lambda _msg: None)
    r0 = base_rate(workload)
    bounds = [bound(c) for c in cands] if bound else [None] * len(cands)
    order = sorted(range(len(cands)), key=lambda i: -bounds[i]) if bound else range(len(cands))
    rows: dict[int, dict] = {}
    best_per_dev, last = 0.0, None
    for n, i in enumerate(order):
        c, cap = cands[i], bounds[i]
        # a candidate whose goodput falls short of the tie band of the best so far cannot win:
        # a looser bracket is enough for its row in the table, and none where its bound says so
        floor = best_per_dev * (1 - GOODPUT_TOLERANCE)
        if cap is not None and cap * BOUND_SLACK < floor:
            rows[i] = _pruned(c, cap)
            say(f"{n + 1}/{len(cands)} {c.label}: at most {cap:.3g} req/s/device, below the "
                f"best so far (not simulated)")
            continue
        hint = (hints or {}).get(c.label) or _hint(c, cap, last, rows.values(), best_per_dev)
        rows[i], small = _search_one(workload, profile, c, slo, seed, sample, limits, hint,
                                     floor * c.devices / r0)
        rows[i]["bound_rps_per_device"] = cap
        last = rows[i]
        best_per_dev = max(best_per_dev, rows[i]["max_goodput_rps_per_device"])
        say(f"{n + 1}/{len(cands)} {c.label}: {rows[i]['max_goodput_rps_per_device']:.3g} "
            f"req/s/device ({rows[i]['simulations']} runs on {len(small)} requests, "
            f"{rows[i]['sim_s']:.2f} s)")
    return [rows[i] for i in range(len(cands))]


def _hint(c, cap: float | None, last: dict | None, done, best_per_dev: float) -> float:
    """The first guess at c's goodput per device. Without bounds: the previous candidate's
    answer where it is a neighbour of the same layout (the next share, budget or split), else
    the best so far. With them: c's bound times the share of their bounds that the searched
    candidates of c's layout (else any) reached."""
    if cap is None:
        prev = last if last is not None and last["layout"] == c.layout else None
        return prev["max_goodput_rps_per_device"] if prev and prev["meets_slo"] else best_per_dev
    met = [r for r in done if not r.get("pruned") and r["meets_slo"] and r["bound_rps_per_device"]]
    same = [r for r in met if r["layout"] == c.layout] or met
    if not same:
        return 0.5 * cap
    share = sorted(r["max_goodput_rps_per_device"] / r["bound_rps_per_device"] for r in same)
    return cap * share[len(share) // 2]


def _search_one(workload, profile, c, slo, seed, sample, limits, hint, reach):
    """(c's row, the sample it was searched on). A unit of d devices takes d times the
    requests per second: d times the sample, so its sample spans as many request durations;
    where the sample is still too short for a steady state at the answer (capped), twice as
    many, up to the whole workload."""
    r0 = base_rate(workload)
    size, b, runs = sample * c.devices, None, []
    while True:
        small = thinned(workload, size)
        start = (b.lo if b is not None and b.lo > 0 else hint * c.devices / r0) or 1.0
        b = search(lambda x, w=small: _run(w, profile, c, slo, x, seed, limits), slo,
                   start=start, precision=FINE_PRECISION, out_of_reach=reach)
        runs += b.seconds
        if not (b.at_hi or {}).get("too_short") or len(small) >= len(workload):
            break
        size *= 2
    b.seconds = runs
    return _row(c, b, r0, len(small)), small


def decide_top(workload: pd.DataFrame, profile: Profile, cands: list, slo: Slo, rows: list[dict],
               progress: Callable[[str], None] | None = None, seed: int | None = 0,
               limits: dict | None = None) -> list[dict]:
    """`rows` (search_candidates' for `cands`, in that order) with the capped ones searched
    again on the workload repeated until the top is decided (module docstring); each row
    says how many times its workload was repeated (`repeats`). A row the bound pruned stays
    as it is: it could not win at any length."""
    rows = [{**r, "repeats": r.get("repeats", 1)} for r in rows]
    k = 1
    while k < MAX_REPEATS and undecided(rank([r for r in rows if not r.get("pruned")])):
        k *= 2
        again = contenders(rows)
        if progress:
            progress(f"{len(again)} candidates reached the workload's limit (it is too short at "
                     f"their rates): searching them again on it repeated {k} times")
        longer = repeated(workload, k)
        known = {rows[i]["label"]: rows[i]["max_goodput_rps_per_device"] for i in again}  # met before
        for i, r in zip(again, search_candidates(longer, profile, [cands[i] for i in again], slo,
                                                 progress, seed, limits=limits, hints=known)):
            rows[i] = {**r, "repeats": k}
    return rows


def contenders(rows: list[dict]) -> list[int]:
    """The capped rows that could still reach the first's tie band (`reach`), and each
    layout's best (the margin over the best other layout reads it): those get the longer
    workload; a row that cannot keeps its `>= X`."""
    live = [(i, r) for i, r in enumerate(rows) if not r.get("pruned")]
    ranked = rank([r for _, r in live])
    top = ranked[0]
    floor = top["max_goodput_rps_per_device"] * (1 - GOODPUT_TOLERANCE)
    firsts = {id(next(r for r in ranked if r["layout"] == lay)) for lay in {r["layout"] for r in ranked}}
    return [i for i, r in live if r.get("capped")
            and (reach(r, top) >= floor or id(r) in firsts)]


def reach(r: dict, top: dict) -> float:
    """What row r could show on the workload the first was searched on: a capped row's limit
    grows about in proportion to the workload's length (a few request durations of it), so
    one searched on a shorter repeat is scaled up to the first's; an uncapped row is as found."""
    g = r["max_goodput_rps_per_device"]
    return g * top.get("repeats", 1) / r.get("repeats", 1) if r.get("capped") else g


def undecided(ranked: list[dict]) -> bool:
    """Whether the first of `ranked` is capped with another candidate that reaches its tie
    band: the ranking then reads the workload's limit, not the layouts."""
    top = ranked[0]
    if not top.get("capped"):
        return False
    floor = top["max_goodput_rps_per_device"] * (1 - GOODPUT_TOLERANCE)
    return any(reach(r, top) >= floor for r in ranked[1:] if not _twin(r, top))


def _twin(r: dict, top: dict) -> bool:
    """A row the simulator cannot tell from the first (the same bracket on the same workload:
    e.g. chunk budgets above every prompt of it): no longer workload separates them, the
    ranking rule's TBT and simplicity do."""
    return (r.get("repeats", 1) == top.get("repeats", 1)
            and r.get("goodput_bracket_rps_per_device") == top.get("goodput_bracket_rps_per_device")
            and r.get("tbt_p99_s") == top.get("tbt_p99_s"))


def repeated(workload: pd.DataFrame, k: int) -> pd.DataFrame:
    """The workload k times over, each copy starting one mean gap after the last one ends:
    the same rate and mix, k times as long (arrival_s from 0)."""
    t = workload["arrival_s"].to_numpy(dtype=float)
    period = float(t[-1] - t[0]) + (float(t[-1] - t[0]) / max(len(t) - 1, 1) or 1.0)
    out = pd.concat([workload.assign(arrival_s=t - t[0] + i * period) for i in range(k)],
                    ignore_index=True)
    out.attrs = dict(workload.attrs)
    return out


def offered(workload: pd.DataFrame, profile: Profile, cand, slo: Slo, devices: int,
            seed: int | None = 0) -> dict:
    """The figures at the workload's own rate on `devices` devices (each unit of `cand` takes
    its share), on the whole workload; plus `sim_s`, the run's time."""
    t = time.perf_counter()
    s = predict(workload, profile, cand, slo, cand.devices / devices, seed)
    return {**{k: s.get(k) for k in SHOWN}, "confidence": s.get("confidence", {}),
            "sim_s": time.perf_counter() - t}


def _run(workload: pd.DataFrame, profile: Profile, c, slo: Slo, scale: float,
         seed: int | None, limits: dict | None = None) -> dict:
    """predict(), failing early where the first quarter of the requests already misses more
    than the whole may (the summary is then the quarter's, with `partial` set), and failing a
    rate at which the workload is too short to show a steady state (`too_short`)."""
    s = _predict_early(workload, profile, c, slo, scale, seed, limits)
    arrivals_s = float(workload["arrival_s"].iloc[-1] - workload["arrival_s"].iloc[0]) / scale
    typical_s = (s.get("ttft_p50_s") or 0.0) + (s.get("tbt_mean_s") or 0.0) * float(
        workload["output_tokens"].mean())
    if s.get("slo_attainment") and arrivals_s < STEADY * typical_s:
        return {**s, "slo_attainment": 0.0, "too_short": True}
    return s


def _predict_early(workload: pd.DataFrame, profile: Profile, c, slo: Slo, scale: float,
                   seed: int | None, limits: dict | None) -> dict:
    n = len(workload)
    if n >= 200:
        head = predict(workload.iloc[: n // 4], profile, c, slo, scale, seed, limits)
        misses = (1.0 - head["slo_attainment"]) * head["num_requests"]
        if misses > (1.0 - slo.attain) * n + 1e-9:
            return {**head, "slo_attainment": 0.0, "partial": True}
    return predict(workload, profile, c, slo, scale, seed, limits)


def _pruned(c, cap: float) -> dict:
    """The row of a candidate the search skipped: its bound is below the best's tie band."""
    return {"label": c.label, "layout": c.layout, "params": c.params, "devices": c.devices,
            "pruned": True, "bound_rps_per_device": cap, "max_goodput_rps_per_device": 0.0,
            "meets_slo": False, "simulations": 0, "sim_s": 0.0, "search_requests": 0,
            "tbt_p99_s": float("nan"), "at_goodput": {}, "simplicity": list(c.simplicity)}


def _row(c, b: Bracket, r0: float, sample: int) -> dict:
    per_dev = r0 / c.devices
    at = b.at_lo or b.at_hi or {}
    return {"label": c.label, "layout": c.layout, "params": c.params, "devices": c.devices,
            "max_goodput_rps_per_device": b.lo * per_dev,
            "goodput_bracket_rps_per_device": [b.lo * per_dev,
                                               b.hi * per_dev if b.hi != float("inf") else None],
            "rate_scale": b.lo, "meets_slo": b.at_lo is not None,
            "capped": bool((b.at_hi or {}).get("too_short")),
            "tbt_p99_s": at.get("tbt_p99_s", float("nan")),
            "at_goodput": {k: at.get(k) for k in SHOWN},
            "search_requests": sample, "simulations": len(b.seconds), "sim_s": sum(b.seconds),
            "simplicity": list(c.simplicity)}
