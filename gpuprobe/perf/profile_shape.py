"""What a profile JSON must hold before the simulator runs on it, checked field by field.

A hand-edited or foreign file that parses as JSON can still crash the simulator deep in its
loop (a worker that is a number, a coefficient list one short), hang it (a NaN step time
never advances the clock) or make the ranking pick nothing (negative step times). So
Profile.from_dict checks the shape first and names the field: ``workers.monolithic.prefill.
coef: ...``. Measured and roofline profiles always pass: fits keep coefficients >= 0 and
every figure finite.
"""
from __future__ import annotations

from gpuprobe.units import finite_number

_POSITIVE = ("mixed_factor", "scale")  # multipliers: 0 would make steps free
_FINITE = ("step_overhead_s", "import_s", "import_per_token_s", "recv_s", "recv_per_token_s",
           "arrival_stall_s", "arrival_stall_per_token_s")


def check_profile_dict(d, prefill_terms: tuple, decode_terms: tuple) -> None:
    """Raise ValueError naming the first field of `d` a Profile cannot be built from.

    prefill_terms: the prefill curves' allowed term lists; decode_terms: the decode curve's."""
    if not isinstance(d, dict):
        raise ValueError(f"expected a JSON object with 'workers', got {_kind(d)}")
    workers = d.get("workers")
    if not isinstance(workers, dict) or not workers:
        raise ValueError("workers: expected an object of one or more workers (monolithic, "
                         f"intra.prefill, ...), got {_kind(workers)}")
    _workers(workers, "workers", prefill_terms, decode_terms)
    family = d.get("tp_workers", {})
    _object(family, "tp_workers")
    for tp, ws in family.items():
        if not (isinstance(tp, str) and tp.isdigit() and int(tp) >= 1):
            raise ValueError(f"tp_workers.{tp}: expected a TP size (a whole number >= 1) as the key")
        _object(ws, f"tp_workers.{tp}")
        _workers(ws, f"tp_workers.{tp}", prefill_terms, decode_terms)
    links = d.get("links", {})
    _object(links, "links")
    for key, link in links.items():
        _object(link, f"links.{key}")
        _number(link, "latency_s", f"links.{key}", lambda v: v >= 0, "must not be negative",
                required=True)
        _number(link, "bytes_per_s", f"links.{key}", lambda v: v > 0, "must be above 0",
                required=True)
    _object(d.get("overhead", {}), "overhead")
    _number(d, "kv_bytes_per_token", "", lambda v: v >= 0, "must not be negative")
    _number(d, "share_alpha", "", lambda v: v >= 0, "must not be negative")
    _number(d, "prefill_share", "", lambda v: 0 < v < 1, "must be between 0 and 1 (exclusive)")


def _workers(workers: dict, where0: str, prefill_terms: tuple, decode_terms: tuple) -> None:
    for key, w in workers.items():
        where = f"{where0}.{key}"
        _object(w, where)
        _curve(w, "prefill", prefill_terms, where)
        _curve(w, "decode", (decode_terms,), where)
        for name in _POSITIVE:
            _number(w, name, where, lambda v: v > 0, "must be above 0")
        for name in _FINITE:
            _number(w, name, where)
        _count(w, "tp", where, 1)
        if w.get("max_kv_tokens") is not None:
            _count(w, "max_kv_tokens", where, 0)


def _curve(w: dict, name: str, allowed: tuple, where: str) -> None:
    where = f"{where}.{name}"
    c = w.get(name)
    if c is None:
        raise ValueError(f"{where}: missing")
    _object(c, where)
    terms = c.get("terms")
    if not isinstance(terms, list) or tuple(terms) not in allowed:
        raise ValueError(f"{where}.terms: expected {' or '.join(map(str, map(list, allowed)))}, "
                         f"got {terms!r}")
    coef = c.get("coef")
    if not isinstance(coef, list) or len(coef) != len(terms):
        raise ValueError(f"{where}.coef: expected {len(terms)} numbers (one per term), got {coef!r}")
    for i, v in enumerate(coef):
        if not finite_number(v) or float(v) < 0:
            raise ValueError(f"{where}.coef[{i}]: expected a finite number >= 0 (seconds per "
                             f"unit), got {v!r}")


def _number(d: dict, name: str, where: str, ok=lambda v: True, rule: str = "",
            required: bool = False) -> None:
    field = f"{where}.{name}" if where else name
    if name not in d:
        if required:
            raise ValueError(f"{field}: missing")
        return
    v = d[name]
    if not finite_number(v):
        raise ValueError(f"{field}: expected a finite number, got {v!r}")
    if not ok(float(v)):
        raise ValueError(f"{field}: {rule}, got {v!r}")


def _count(d: dict, name: str, where: str, least: int) -> None:
    if name in d and not (isinstance(d[name], int) and not isinstance(d[name], bool)
                          and d[name] >= least):
        raise ValueError(f"{where}.{name}: expected a whole number >= {least}, got {d[name]!r}")


def _object(v, where: str) -> None:
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object, got {_kind(v)}")


def _kind(v) -> str:
    if v == {}:
        return "an empty object"
    return {dict: "an object", list: "a list", str: "a string", type(None): "nothing"}.get(
        type(v), f"{v!r}")
