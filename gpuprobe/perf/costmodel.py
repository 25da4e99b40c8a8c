"""The cost model as plain data: how long an engine step, a KV handoff and the front end take.

One `StepCost` per engine worker (the monolithic engine, or the prefill / decode worker of a
split layout), because a worker's speed depends on its share of the device:

    prefill step   t = a + b*T + c*Q + e*k    T: prefill tokens in the step,
                                              Q: attention work, sum over chunks of
                                                 (start + n)^2 - start^2  (= T^2 for one prompt)
                                              k: prompts in the step (the runner handles each
                                                 prompt apart; e optional)
    decode step    t = d0 + d1*B + d2*C       B: decoding sequences, C: KV positions their
                                              attention reads: the sum of their contexts for
                                              a paged kernel, B * the longest one where one
                                              padded call serves them all (decode_attention)
    mixed step     t = mixed_factor * (prefill + decode - min(a, d0))   one fixed cost, not two
    every step     + step_overhead_s          scheduling and streaming between forward passes
    each arrival   + arrival_stall_s          on a busy worker's clock (the front's burst of
                   + arrival_stall_per_token_s * prompt tokens   work per request and per
                                              prompt token on its cores; validate sets it)
    first step on  + wake_s(idle gap)         an idle worker (waking it: wake.py); inputs that
                                              come meanwhile wait for the next step

times `scale` (a worker derived from another at a smaller share runs slower). A `Profile`
holds the workers, the KV handoff (latency + bytes / bandwidth, per link kind) and the front
end (HTTP, tokenization, IPC per request, streaming per token). Each curve is a `Fit` with its
quality; `Profile.confidence()` gathers every reason that makes a prediction 'low'.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from gpuprobe.perf.fit import MEASURED, Fit, fixed
from gpuprobe.perf.wake import spread_wake_fn, wake_fn

PREFILL_TERMS = ("1", "T", "Q")
BATCHED_PREFILL_TERMS = ("1", "T", "Q", "k")  # + per prompt in the step
DECODE_TERMS = ("1", "B", "C")
DECODE_ATTENTION = ("paged", "padded")  # what the decode term's C counts (StepCost)
NOISE_QUANTILES = 100  # step-time noise is kept as this many quantiles, (i + 0.5) / 100
WORKERS = ("monolithic", "intra.prefill", "intra.decode", "cross.prefill", "cross.decode")


@dataclass(frozen=True)
class StepCost:
    """One worker's step-time curves. All times in seconds."""

    prefill: Fit
    decode: Fit
    mixed_factor: float = 1.0
    mixed_source: str = "default"   # 'measured' once mixed steps were seen
    step_overhead_s: float = 0.0
    scale: float = 1.0
    threads: int | None = None       # CPU threads the worker ran with when measured
    reasons: tuple[str, ...] = ()    # extra reasons (e.g. derived from another worker)
    # Decode worker only: importing a handed-off request's KV between steps (receive, unpickle,
    # copy into the cache) holds up the running batch: import_s + import_per_token_s * tokens.
    import_s: float = 0.0
    import_per_token_s: float = 0.0
    # Cross decode worker only: its receive thread reads and deserializes each handed-off KV
    # beside the loop, on the loop's cores (recv_s + recv_per_token_s * tokens of that thread's
    # CPU). The step records cannot show it, so it is fitted from the requests' kv_recv_cpu_s
    # and charged like the import.
    recv_s: float = 0.0
    recv_per_token_s: float = 0.0
    # Which KV positions the decode term's C counts: 'paged' (each sequence's own context, as
    # a paged-attention kernel reads) or 'padded' (every sequence padded to the batch's
    # longest context, as the reference runner's one batched attention call reads them).
    decode_attention: str = "paged"
    # Step-time noise: quantiles of how far repeated steps of one shape fell from their own
    # median in calibration (NOISE_QUANTILES of duration / median, prefill-only and
    # decode-only steps apart). The simulator multiplies each step's time (overhead aside) by
    # a seeded draw from them; empty: every step exactly on the curve.
    prefill_noise: tuple[float, ...] = ()
    decode_noise: tuple[float, ...] = ()
    # A decode worker's steps that a burst of the front's work fell in (front_events: an
    # arrival, a first token, a KV import) spread wider: when this holds quantiles,
    # decode_noise is the other steps' and the simulator draws from this one for those.
    decode_event_noise: tuple[float, ...] = ()
    # Work beside the loop that comes with each request's arrival, on the worker's cores (a
    # front sharing them parses and tokenizes it): the worker's clock loses this much for
    # every request that arrives while it is busy. A burst per arrival, not a stretch of every
    # step: most steps meet none, so it moves the mean step and the queue, not the median.
    arrival_stall_s: float = 0.0
    arrival_stall_per_token_s: float = 0.0  # ... and per prompt token of the arriving request
    # Waking the worker: ((idle gap s, extra s), ...) ascending, measured by calibration's
    # idle probes (wake.py); the step that an input which finds the worker idle starts takes
    # wake_fn()(gap) longer.
    wake: tuple[tuple[float, float], ...] = ()
    # How far the idle probes fell from that curve (wake.wake_spread): quantiles in seconds,
    # ascending, either sign; with an rng the simulator adds a draw from them to each wake-up.
    wake_spread: tuple[float, ...] = ()
    # The devices one worker spans (a tensor-parallel group): its curves are the group's step
    # times, the all-reduce per layer included; a deployment of it takes tp devices.
    tp: int = 1
    # KV token positions the worker's cache holds (memory.py: what the devices' memory leaves
    # beside weights and activations); None where unknown (the scheduler's default applies).
    max_kv_tokens: int | None = None

    @property
    def noisy(self) -> bool:
        return bool(self.prefill_noise or self.decode_noise or self.decode_event_noise)

    def step_fn(self):
        """A fast scalar function (T, Q, B, C, k) -> seconds, for the simulator's hot loop.
        k: prompts in the step; when left out it is taken as T^2/Q (exact for k equal whole
        prompts, and far too low for unequal ones: 700 + 10 x 30 tokens give 2.0, not 11)."""
        a, b, c, *rest = self.prefill.coef
        e = rest[0] if rest else 0.0  # per prompt in the step
        d0, d1, d2 = self.decode.coef
        m, ovh, s = self.mixed_factor, self.step_overhead_s, self.scale
        shared = min(a, d0)

        def step_s(T: int, Q: float, B: int, C: int, k: int | None = None) -> float:
            if T:
                t = a + b * T + c * Q + (e * k if k is not None else e * T * T / Q if Q else 0.0)
                if B:
                    t = m * (t + d0 + d1 * B + d2 * C - shared)
            else:
                t = d0 + d1 * B + d2 * C
            return (t + ovh) * s
        return step_s

    def decode_coefs(self) -> tuple[float, float, float]:
        """(d0 + overhead, d1, d2), all times scale: a decode step = k0 + k1*B + k2*C."""
        d0, d1, d2 = self.decode.coef
        s = self.scale
        return ((d0 + self.step_overhead_s) * s, d1 * s, d2 * s)

    def import_fn(self):
        """(prompt tokens) -> seconds the worker's clock advances to admit one handed-off
        request, import plus receive (times scale); None when the profile has neither."""
        i0, i1, s = (self.import_s + self.recv_s, self.import_per_token_s + self.recv_per_token_s,
                     self.scale)
        if not (i0 or i1):
            return None
        return lambda tokens: (i0 + i1 * tokens) * s

    def wake_fn(self):
        """(idle gap s) -> seconds the first step after an idle gap takes over its curve
        (times scale); None without a measured wake-up."""
        return wake_fn(self.wake, self.scale)

    def wake_draw_fn(self, rng):
        """wake_fn() with each wake-up plus a draw from wake_spread (rng: a Generator; None,
        or no spread: wake_fn() itself)."""
        if rng is None:
            return self.wake_fn()
        return spread_wake_fn(self.wake, self.wake_spread, self.scale, rng)

    def reasons_all(self) -> tuple[str, ...]:
        out = list(self.reasons) + list(self.prefill.reasons) + list(self.decode.reasons)
        if self.mixed_source == "default":
            out.append("mixed-step slowdown not measured (factor 1.0 assumed)")
        return tuple(out)

    def to_dict(self) -> dict:
        return {"prefill": self.prefill.to_dict(), "decode": self.decode.to_dict(),
                "mixed_factor": self.mixed_factor, "mixed_source": self.mixed_source,
                "step_overhead_s": self.step_overhead_s, "scale": self.scale,
                "threads": self.threads, "reasons": list(self.reasons),
                "import_s": self.import_s, "import_per_token_s": self.import_per_token_s,
                "recv_s": self.recv_s, "recv_per_token_s": self.recv_per_token_s,
                "decode_attention": self.decode_attention,
                "prefill_noise": list(self.prefill_noise), "decode_noise": list(self.decode_noise),
                "decode_event_noise": list(self.decode_event_noise),
                "arrival_stall_s": self.arrival_stall_s,
                "arrival_stall_per_token_s": self.arrival_stall_per_token_s,
                "wake": [list(p) for p in self.wake], "wake_spread": list(self.wake_spread),
                "tp": self.tp, "max_kv_tokens": self.max_kv_tokens}

    @classmethod
    def from_dict(cls, d: dict) -> "StepCost":
        attention = d.get("decode_attention", "paged")
        if attention not in DECODE_ATTENTION:
            raise ValueError(f"decode_attention must be one of {', '.join(DECODE_ATTENTION)}, "
                             f"got {attention!r}")
        return cls(prefill=Fit.from_dict(d["prefill"]), decode=Fit.from_dict(d["decode"]),
                   mixed_factor=float(d.get("mixed_factor", 1.0)),
                   mixed_source=d.get("mixed_source", "default"),
                   step_overhead_s=float(d.get("step_overhead_s", 0.0)),
                   scale=float(d.get("scale", 1.0)), threads=d.get("threads"),
                   reasons=tuple(d.get("reasons", ())),
                   import_s=float(d.get("import_s", 0.0)),
                   import_per_token_s=float(d.get("import_per_token_s", 0.0)),
                   recv_s=float(d.get("recv_s", 0.0)),
                   recv_per_token_s=float(d.get("recv_per_token_s", 0.0)),
                   decode_attention=attention,
                   prefill_noise=_noise(d.get("prefill_noise", ())),
                   decode_noise=_noise(d.get("decode_noise", ())),
                   decode_event_noise=_noise(d.get("decode_event_noise", ())),
                   arrival_stall_s=float(d.get("arrival_stall_s", 0.0)),
                   arrival_stall_per_token_s=float(d.get("arrival_stall_per_token_s", 0.0)),
                   wake=_wake(d.get("wake", ())),
                   wake_spread=_noise(d.get("wake_spread", ()), "wake_spread", positive=False),
                   tp=int(d.get("tp", 1)),
                   max_kv_tokens=None if d.get("max_kv_tokens") is None else int(d["max_kv_tokens"]))


def _noise(values, what: str = "step noise", positive: bool = True) -> tuple[float, ...]:
    """A profile's noise quantiles: finite, ascending, and positive (factors) unless not
    `positive` (offsets in seconds, either sign)."""
    q = tuple(float(v) for v in values)
    low = 0.0 if positive else -float("inf")
    if any(not (low < v < float("inf")) for v in q) or list(q) != sorted(q):
        raise ValueError(f"{what} quantiles must be {'positive, ' if positive else ''}finite "
                         "and ascending")
    return q


def _wake(points) -> tuple[tuple[float, float], ...]:
    """A profile's wake-up curve: (gap, seconds) pairs, gaps ascending and > 0, seconds >= 0."""
    out = tuple((float(g), float(w)) for g, w in points)
    gaps = [g for g, _ in out]
    if any(not (g > 0 and w >= 0 and w < float("inf")) for g, w in out) or gaps != sorted(set(gaps)):
        raise ValueError("wake must be (gap, seconds) pairs with gaps > 0 ascending, seconds >= 0")
    return out


@dataclass(frozen=True)
class Link:
    """KV handoff over one link: seconds = latency_s + bytes / bytes_per_s.

    spread: NOISE_QUANTILES quantiles of how far lone handoffs (nothing else in flight) fell
    from that line, as measured / fitted; the simulator multiplies each handoff by a seeded
    draw from them. Empty: every handoff on the line.
    """

    latency_s: float
    bytes_per_s: float
    source: str = "default"
    spread: tuple[float, ...] = ()

    def seconds(self, num_bytes: float) -> float:
        return self.latency_s + num_bytes / self.bytes_per_s

    def to_dict(self) -> dict:
        return {"latency_s": self.latency_s, "bytes_per_s": self.bytes_per_s,
                "source": self.source, "spread": list(self.spread)}

    @classmethod
    def from_dict(cls, d: dict) -> "Link":
        return cls(float(d["latency_s"]), float(d["bytes_per_s"]), str(d.get("source", "default")),
                   _noise(d.get("spread", ()), "link spread"))


@dataclass(frozen=True)
class Overhead:
    """Front-end costs outside engine steps, in seconds.

    request_in_s: HTTP receive + tokenize + hand to the engine (added before the engine sees a
    request); token_out_s: from a step's end to the client reading that token (per token);
    split_in_s: extra per-request IPC in split layouts (router -> prefill worker).
    """

    request_in_s: float = 0.0
    token_out_s: float = 0.0
    split_in_s: float = 0.0
    source: str = "default"


def kv_link_defaults() -> dict[str, Link]:
    # Intra: a copy through shared memory on one host; cross: a TCP hop. Rough, low confidence.
    return {"intra": Link(20e-6, 5e9), "cross": Link(200e-6, 1.25e9)}


@dataclass(frozen=True)
class Profile:
    """Everything the simulator needs about one deployment. JSON-serialisable (to_dict)."""

    workers: dict[str, StepCost]
    links: dict[str, Link] = field(default_factory=kv_link_defaults)
    overhead: Overhead = Overhead()
    kv_bytes_per_token: int = 0
    share_alpha: float = 1.0   # a worker at share s runs at s**alpha of the whole device's speed
    prefill_share: float = 0.5
    name: str = "profile"
    meta: dict = field(default_factory=dict)
    # The five workers at other tensor-parallel sizes, {tp: {key: StepCost}} (tp_family.py):
    # what a spec profile holds so the layout search can weigh TP; empty for a measured one.
    tp_workers: dict = field(default_factory=dict)

    def worker(self, layout: str, role: str) -> StepCost:
        """The step costs of `role` ('mixed'|'prefill'|'decode') in `layout`, derived if not measured."""
        key = "monolithic" if layout == "monolithic" else f"{layout}.{role}"
        if key in self.workers:
            return self.workers[key]
        base = self.workers.get("monolithic") or next(iter(self.workers.values()))
        if layout == "intra":
            share = self.prefill_share if role == "prefill" else 1.0 - self.prefill_share
            return replace(interpolated(base), scale=base.scale * share ** -self.share_alpha,
                           reasons=base.reasons + (f"{key} derived from the whole device at share "
                                                   f"{share:.2f} (alpha {self.share_alpha})",))
        return replace(base, reasons=base.reasons + (f"{key} assumed equal to monolithic",))

    def num_kv_blocks(self, layout: str, role: str, block_size: int = 16) -> int | None:
        """KV blocks of `block_size` tokens the worker of `role` in `layout` holds; None where
        the profile does not say (its worker's max_kv_tokens)."""
        tokens = self.worker(layout, role).max_kv_tokens
        return None if tokens is None else max(1, tokens // block_size)

    def link(self, layout: str) -> Link:
        return self.links.get(layout) or kv_link_defaults()[layout]

    def confidence(self, layouts=("monolithic",)) -> dict:
        """{'level': 'high'|'low', 'reasons': [...]} over the workers and links `layouts` use."""
        reasons: list[str] = []
        for layout in layouts:
            roles = ("mixed",) if layout == "monolithic" else ("prefill", "decode")
            for role in roles:
                reasons += self.worker(layout, role).reasons_all()
            if layout != "monolithic" and self.link(layout).source == "default":
                reasons.append(f"{layout} KV handoff link not measured (default figures)")
        if self.overhead.source == "default":
            reasons.append("front-end overheads not measured (0 assumed)")
        reasons = list(dict.fromkeys(reasons))
        return {"level": "low" if reasons else "high", "reasons": reasons,
                "origins": self.origins(layouts)}

    def origins(self, layouts=("monolithic",)) -> dict:
        """{worker: {'prefill': origin, 'decode': origin}} (fit.ORIGINS' words) for `layouts`."""
        out = {}
        for layout in layouts:
            for role in (("mixed",) if layout == "monolithic" else ("prefill", "decode")):
                w = self.worker(layout, role)
                key = "monolithic" if layout == "monolithic" else f"{layout}.{role}"
                out[key] = {"prefill": w.prefill.origin, "decode": w.decode.origin}
        return out

    def to_dict(self) -> dict:
        return {"version": 1, "name": self.name, "kv_bytes_per_token": self.kv_bytes_per_token,
                "share_alpha": self.share_alpha, "prefill_share": self.prefill_share,
                "workers": {k: w.to_dict() for k, w in self.workers.items()},
                "links": {k: v.to_dict() for k, v in self.links.items()},
                "overhead": vars(self.overhead), "meta": self.meta,
                "tp_workers": {str(tp): {k: w.to_dict() for k, w in ws.items()}
                               for tp, ws in self.tp_workers.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        from gpuprobe.perf.profile_shape import check_profile_dict

        check_profile_dict(d, (PREFILL_TERMS, BATCHED_PREFILL_TERMS), DECODE_TERMS)
        return cls(workers={k: StepCost.from_dict(w) for k, w in d["workers"].items()},
                   links={k: Link.from_dict(v) for k, v in d.get("links", {}).items()}
                   or kv_link_defaults(),
                   overhead=Overhead(**d.get("overhead", {})),
                   kv_bytes_per_token=int(d.get("kv_bytes_per_token", 0)),
                   share_alpha=float(d.get("share_alpha", 1.0)),
                   prefill_share=float(d.get("prefill_share", 0.5)),
                   name=d.get("name", "profile"), meta=d.get("meta", {}),
                   tp_workers={int(tp): {k: StepCost.from_dict(w) for k, w in ws.items()}
                               for tp, ws in d.get("tp_workers", {}).items()})

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


def interpolated(w: StepCost) -> StepCost:
    """`w` as a worker derived from it: fitted curves become 'interpolated' (ORIGINS), the
    rest keep their source."""
    def mark(f: Fit) -> Fit:
        return replace(f, source="interpolated") if f.source in MEASURED else f
    return replace(w, prefill=mark(w.prefill), decode=mark(w.decode))


def simple_worker(a: float, b: float, c: float, d0: float, d1: float, d2: float,
                  source: str = "default", **kw) -> StepCost:
    """A StepCost from known coefficients (tests, roofline)."""
    return StepCost(prefill=fixed(PREFILL_TERMS, (a, b, c), source),
                    decode=fixed(DECODE_TERMS, (d0, d1, d2), source), **kw)
