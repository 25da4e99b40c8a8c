"""The controller lease: who may change this server's layout, and until when.

One holder at a time (an autopilot, a person's `apply`) holds the lease for a TTL and renews
it; while it is held, a layout change from anyone else is refused (409, naming the holder and
the expiry) unless it says `force`, which ends the lease and is recorded as a takeover. The
server owns this, not a store file, so two controllers that reach the server by two names
(`localhost`, `127.0.0.1`) or keep two stores still see one lease.

Pure state on a clock the caller passes in; the HTTP routes are in app.py.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

MAX_TTL_S = 3600.0     # a holder that died is locked out of nobody for longer than this
MAX_HOLDER_CHARS = 128
MAX_PURPOSE_CHARS = 200


class LeaseError(Exception):
    """A request the lease refuses: HTTP `status` (400 malformed, 409 held by another or not
    held), `param` the field at fault."""

    def __init__(self, message: str, status: int = 409, param: str | None = None):
        super().__init__(message)
        self.status, self.param = status, param


@dataclass(frozen=True)
class Grant:
    holder: str
    purpose: str
    ttl_s: float
    acquired_s: float  # epoch seconds
    expires_s: float   # epoch seconds


@dataclass(frozen=True)
class Takeover:
    """A lease ended by someone else's `force`: what the old holder is told when it renews."""
    holder: str       # whose lease it was
    by: str           # who forced
    at_s: float
    how: str          # "lease" (took the lease) or "layout" (a forced layout change)


def _expiry(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class Lease:
    def __init__(self, clock=time.time):
        self._clock = clock
        self._grant: Grant | None = None
        self.last_takeover: Takeover | None = None

    def current(self) -> Grant | None:
        """The grant in force now; an expired one is gone."""
        g = self._grant
        if g is not None and self._clock() >= g.expires_s:
            self._grant = None
            return None
        return g

    def acquire(self, holder: str, purpose: str, ttl_s: float,
                force: bool = False) -> tuple[Grant, Grant | None]:
        """(the new grant, the grant it took over with `force`, if any). The holder of the
        lease in force may acquire again (a renewal that may change purpose and TTL)."""
        now, held = self._clock(), self.current()
        if held is not None and held.holder != holder and not force:
            raise LeaseError(held_message(held, now))
        taken = held if held is not None and held.holder != holder else None
        if taken is not None:
            self.last_takeover = Takeover(taken.holder, holder, now, "lease")
        self._grant = Grant(holder, purpose, ttl_s, now if taken or held is None else
                            held.acquired_s, now + ttl_s)
        return self._grant, taken

    def renew(self, holder: str, ttl_s: float | None = None) -> Grant:
        """Extend the holder's lease by ttl_s (default: its own TTL) from now. A lease that
        expired or was taken over is not renewed: its holder must stop, not carry on as if
        nothing had changed in between."""
        now, held = self._clock(), self.current()
        if held is None or held.holder != holder:
            raise LeaseError(self.lost_message(holder, held, now))
        ttl = held.ttl_s if ttl_s is None else ttl_s
        self._grant = Grant(holder, held.purpose, ttl, held.acquired_s, now + ttl)
        return self._grant

    def release(self, holder: str) -> Grant:
        """End the holder's lease; returns the grant that ended."""
        now, held = self._clock(), self.current()
        if held is None or held.holder != holder:
            raise LeaseError(self.lost_message(holder, held, now))
        self._grant = None
        return held

    def check_change(self, holder: str | None, force: bool, by: str) -> Grant | None:
        """Before a layout change by `holder` (None: a caller holding no lease): raises
        LeaseError while someone else holds the lease, unless `force`; with force that lease
        ends (a takeover) and is returned, so the change can be recorded as forced."""
        now, held = self._clock(), self.current()
        if held is None or held.holder == holder:
            return None
        if not force:
            raise LeaseError(held_message(held, now) + "; a layout change needs the lease "
                             "(or force, which ends it)")
        self._grant = None
        self.last_takeover = Takeover(held.holder, holder or by, now, "layout")
        return held

    def lost_message(self, holder: str, held: Grant | None, now: float) -> str:
        t = self.last_takeover
        if t is not None and t.holder == holder and (held is None or held.holder != holder):
            what = "took the lease" if t.how == "lease" else "forced a layout change"
            return (f"{holder} does not hold the lease: {t.by} {what} at {_expiry(t.at_s)} "
                    f"(force)")
        if held is not None:
            return f"{holder} does not hold the lease: " + held_message(held, now)
        return f"{holder} does not hold the lease: no lease is held (it expired or was released)"

    def view(self) -> dict:
        """GET /admin/lease and the `lease` of GET /admin/layout."""
        now, g = self._clock(), self.current()
        out: dict = {"held": g is not None}
        if g is not None:
            out.update(asdict(g), expires_in_s=round(g.expires_s - now, 3))
        if self.last_takeover is not None:
            out["last_takeover"] = asdict(self.last_takeover)
        return out


def held_message(g: Grant, now: float) -> str:
    why = f" for {g.purpose!r}" if g.purpose else ""
    return (f"the lease is held by {g.holder}{why} until {_expiry(g.expires_s)} "
            f"(in {max(0.0, g.expires_s - now):.0f} s)")


DEFAULT_TTL_S = 60.0


def parse_body(body, ttl_optional: bool = False) -> dict:
    """A lease request's body -> {holder, purpose, ttl_s, force}; LeaseError 400 naming the
    field. `holder` is required; `ttl_s` defaults to 60 s (ttl_optional: to None, a renewal
    keeping the lease's own TTL)."""
    if not isinstance(body, dict):
        raise LeaseError("the body must be a JSON object with 'holder'", 400, None)
    known = ("holder", "purpose", "ttl_s", "force")
    unknown = [k for k in body if k not in known]
    if unknown:
        raise LeaseError(f"unknown field {unknown[0]!r}; the fields are {', '.join(known)}", 400,
                         unknown[0])
    holder, purpose = body.get("holder"), body.get("purpose", "")
    text_field("holder", holder, MAX_HOLDER_CHARS, required=True)
    text_field("purpose", purpose, MAX_PURPOSE_CHARS)
    ttl = body.get("ttl_s", DEFAULT_TTL_S)
    if ttl is None and ttl_optional:
        return {"holder": holder, "purpose": purpose, "ttl_s": None,
                "force": _force(body)}
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= MAX_TTL_S:
        raise LeaseError(f"'ttl_s' must be a number of seconds in (0, {MAX_TTL_S:g}]", 400,
                         "ttl_s")
    return {"holder": holder, "purpose": purpose, "ttl_s": float(ttl), "force": _force(body)}


def _force(body: dict) -> bool:
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise LeaseError("'force' must be true or false", 400, "force")
    return force


def text_field(name: str, value, max_chars: int, required: bool = False) -> None:
    """LeaseError 400 unless `value` is printable text of at most max_chars (non-empty when
    required)."""
    if not isinstance(value, str) or len(value) > max_chars or not value.isprintable() or \
            (required and not value.strip()):
        need = "non-empty " if required else ""
        raise LeaseError(f"'{name}' must be {need}printable text of at most {max_chars} "
                         f"characters", 400, name)
