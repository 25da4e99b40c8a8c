"""Which worker takes a request, and what becomes of requests when a remote worker is lost.
Plain functions over a layout's workers and the router's requests (no I/O)."""

from __future__ import annotations

from collections import Counter

MAX_ATTEMPTS = 3  # dispatches of one request before a lost worker fails it


def least_loaded(inst, roles: tuple[str, ...], requests, turn: int):
    """The alive worker of `roles` holding the fewest requests (prefill: queued for prefill;
    decode: sent its way or decoding), ties taken in turn so idle workers share the load;
    None when no such worker is alive."""
    workers = [w for w in inst.workers.values() if w.spec.role in roles and w.alive]
    if not workers:
        return None
    by_decode = "decode" in roles
    load = Counter(t.decode_id if by_decode else t.owner for t in requests if t.layout is inst)
    n = len(workers)
    return min(enumerate(workers), key=lambda iw: (load[iw[1].worker_id], (iw[0] - turn) % n))[1]


def after_loss(inst, worker_id: str, requests) -> tuple[list, list]:
    """(to retry, to fail) among the requests of `inst` that worker_id held or was to decode:
    one that streamed nothing yet runs again elsewhere; one that did cannot (its client has
    tokens a new run would repeat), nor one already dispatched MAX_ATTEMPTS times."""
    retry, fail = [], []
    for t in requests:
        if t.layout is not inst or worker_id not in (t.owner, t.decode_id):
            continue
        if t.token_times_s or t.attempt + 1 >= MAX_ATTEMPTS:
            fail.append(t)
        else:
            retry.append(t)
    return retry, fail
