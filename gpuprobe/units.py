"""Parsing of user-given quantities: durations ("10s", "5m", "7d"), lists, JSON numbers."""
from __future__ import annotations

import math

from gpuprobe.errors import UserError

_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str, what: str = "duration", positive: bool = False) -> float:
    """'250ms', '10s', '5m', '2h', '7d' or a bare number of seconds -> seconds.

    positive: 0 is refused too, for a length that 0 would silently turn into a default or
    into nothing at all (autopilot's --for 0 ran forever)."""
    raw = str(text).strip().lower()
    number, scale = raw, 1.0
    for suffix in sorted(_SECONDS, key=len, reverse=True):
        if raw.endswith(suffix):
            number, scale = raw[: -len(suffix)], _SECONDS[suffix]
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise UserError(f"{what}: {text!r} is not a duration (try 10s, 5m, 2h, 7d)") from None
    if not math.isfinite(value):
        raise UserError(f"{what}: {text!r} is not a finite duration")
    if value < 0:
        raise UserError(f"{what}: {text!r} must not be negative")
    if positive and value == 0:
        raise UserError(f"{what}: {text!r} must be more than 0")
    return value


def finite_number(v) -> bool:
    """A finite JSON number: not a string ("1.5" in a hand-edited file is a mistake too), not a
    bool, not NaN or infinity."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def whole_buckets(span_s: float, bucket_s: float) -> int:
    """How many buckets of bucket_s from 0 a span of span_s seconds (0 to its last request)
    covers to their end. Bucketed rates (analyze, forecast) stop there: a bucket the data ends
    inside would read low."""
    return int(math.floor(span_s / bucket_s + 1e-9))
