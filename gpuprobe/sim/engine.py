"""One simulated engine worker: the engine's policy (SimScheduler), a cost model, a virtual clock.

The worker is fed (ready_s, Sequence) inputs in time order: new requests for roles 'mixed'
and 'prefill', prefilled sequences for role 'decode'. Each step asks the shared Scheduler for
a batch, advances the clock by the cost model's step time, and hands the Scheduler a token per
sequence (postprocess), exactly as the reference server's engine does with real forward passes.

Speed: when the SimScheduler says the next k steps are the same all-decode batch
(uniform_decode_steps), the worker takes as many of them as end before the next input is due
in one macro-step (advance_decodes): the same step times, bit for bit, and the same effects as
single steps, without a schedule() call or a TokenEvent per step. The macro-step's loop only
adds up the clock (it needs the exact end to know where to stop); each step's end is left
unrecorded and rebuilt afterwards, vectorized with the same operations in the same order
(timeline.macro_ends), from what a macro-step records: its start clock, batch and KV
positions.

A prefill-first prefill worker steps through prefill_steps.prefill_stepper: the Scheduler's
admissions and effects, without its per-request objects (the single-step baseline keeps the
Scheduler's path).

Token times are kept compact, never per token: each request's later tokens are runs of
consecutive steps. A run in the uniform decode steps (every decoding sequence took part) is
opened when a sequence starts decoding and closed when it finishes, is preempted or gets a
token in a single step; so a macro-step costs nothing per sequence here.
"""
from __future__ import annotations

from array import array
from collections import deque

import numpy as np

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.engine.sequence import SeqStatus, Sequence
from gpuprobe.perf.costmodel import StepCost
from gpuprobe.perf.front_events import LEAD_S
from gpuprobe.sim.feed import INF, NO_INPUT, InputFeed
from gpuprobe.sim.macro import TOKEN, macro_chain
from gpuprobe.sim.noise import noisy_step_fn
from gpuprobe.sim.prefill_steps import prefill_stepper
from gpuprobe.sim.scheduler import SimScheduler
from gpuprobe.sim.timeline import macro_ends

MIN_MACRO_STEPS = 1  # the bench and tests set it out of reach to get the single-step baseline
RUNNING = SeqStatus.RUNNING


class SimEngine:
    """Runs its inputs to completion; records token times on the virtual clock (seconds).

    After run(): first_s[seq_id] is the engine time of each request's first token produced
    here (index 0); time_axis() gives every step's end; the macro-steps took steps
    [macro_first[m], macro_first[m] + macro_len[m]), num_uniform of them in all (the uniform
    decode steps, numbered in that order: their ordinals); run_ids / run_starts /
    run_counts are the runs of each request's later tokens in time order per request: a
    start >= 0 is a step index, a start < 0 is uniform ordinal -start - 1. prefilled: the
    sequences role 'prefill' prefilled, done at clock prefilled_s; num_steps /
    num_macro_steps count what happened.
    """

    def __init__(self, config: SchedulerConfig, cost: StepCost,
                 rng: np.random.Generator | None = None):
        self.config = config
        self.sched = SimScheduler(config)
        self.step_s = cost.step_fn()
        # Step-time noise (the profile's, drawn from rng): every step differs, so no
        # macro-steps; without an rng or noise the steps lie on the curve.
        self._noisy = rng is not None and cost.noisy
        if self._noisy:
            self.step_s = noisy_step_fn(cost, rng)
        # A decode worker whose profile spreads its steps by the front's bursts (front_events):
        # run()'s events_s and its own imports say which steps draw from the wider table.
        self._by_event = self._noisy and bool(cost.decode_event_noise) and config.role == "decode"
        self._base_s = cost.step_fn() if self._by_event else None
        self._events: list[float] = [INF]
        self._ej = 0
        self._imported = False
        # step_fn's decode-only formula, unrolled into run()'s macro-step (same operations).
        self._dec = (*cost.decode.coef, cost.step_overhead_s, cost.scale)
        # (y + 0.0) * 1.0 == y for every step time y: the loop may skip both operations.
        self._plain = cost.step_overhead_s == 0 and cost.scale == 1
        self._import = cost.import_fn() if config.role == "decode" else None
        self._stall = cost.arrival_stall_s if config.role != "decode" else 0.0
        self._stall_per_token = cost.arrival_stall_per_token_s if config.role != "decode" else 0.0
        # Waking from idle (calibration's idle probes time it on their prefill steps, which a
        # decode worker does not run): added to the step that work finding the worker idle
        # starts; the batch is what is there when it starts, as on the server.
        # Its spread is drawn from a generator of its own, so the step-noise draws are those
        # of a profile without one.
        self._wake = (cost.wake_draw_fn(rng.spawn(1)[0] if rng is not None else None)
                      if config.role != "decode" else None)
        # The decode term's C: the sum of the contexts, or B * the longest (a padded call).
        self._padded = cost.decode_attention == "padded"
        self.sched.decode_run.track_max = self._padded
        self.first_s: dict[str, float] = {}
        # Doubles and int64s, not lists of Python numbers: no object kept per step.
        self.single_ends = array("d")  # ends of the steps taken one at a time, in step order
        self.macro_first, self.macro_len = array("q"), array("q")
        # Macro-step m starts at clock macro_t0[m] with macro_seqs[m] sequences whose first
        # step attends macro_ctx[m] KV positions: all macro_ends() needs to rebuild its ends.
        self.macro_t0, self.macro_seqs, self.macro_ctx = array("d"), array("q"), array("q")
        # Macro-steps that do not start where the one before ended (a single step, a KV
        # import or an idle wait came between): the rest continue their predecessor's clock.
        self.chain_starts = array("q")
        self._chain_end = NO_INPUT  # where the last macro-step ended (NO_INPUT: none yet)
        self.num_uniform = 0
        self.run_ids: list[str] = []
        self.run_starts: list[int] = []
        self.run_counts: list[int] = []
        self._open: dict[str, int] = {}  # seq_id -> uniform ordinal its open run starts at
        self._last_run: dict[str, int] = {}  # seq_id -> position of its latest step run
        self._pending: deque[Sequence] = deque()  # a decode worker's inputs before their import
        self.prefilled: list[Sequence] = []
        self.prefilled_s = array("d")  # when each of prefilled was (seconds)
        self.rejected: list[Sequence] = []
        self.num_steps = 0
        self.num_macro_steps = 0
        self.busy_s = 0.0  # clock time spent in steps and imports (the worker's utilisation)
        self.max_prefill_tokens = 0
        self.max_decode_seqs = 0

    def run(self, ready_s: list[float], seqs: list[Sequence],
            arrive_s: list[float] | None = None, events_s=None) -> None:
        """Feed seqs[i] at clock ready_s[i] (ascending) and run until all are done.
        arrive_s: when each request reached the front (ascending; ready_s[i] less the front's
        time), where the cost's arrival_stall_s (+ arrival_stall_per_token_s * the request's
        prompt tokens) holds up a busy worker. events_s (a decode worker's, ascending): the
        moments the front had a burst of work (front_events), for its decode_event_noise.

        Each turn: the front's bursts and the inputs due by the clock, the KV imports of a
        decode worker, then an idle wait, a macro-step or a single step."""
        if events_s is not None:
            self._events = [*map(float, events_s), INF]
            self._ej = 0
        feed = InputFeed(ready_s, seqs, arrive_s, self._stall, self._stall_per_token)
        self._chain_end = NO_INPUT
        waiting, running = self.sched.waiting, self.sched.running
        min_macro = MIN_MACRO_STEPS  # read once: the bench and tests set it before a run
        plan = self._macro_plan(min_macro)
        macro_steps = macro_chain(self, self._pending, min_macro) if plan is not None else None
        step = self._step
        if self.config.role == "prefill":  # prefill-first: without the Scheduler's objects
            fast = prefill_stepper(self, TOKEN) if min_macro < 10 ** 9 else None
            step = fast or self._prefill_step
        pending, wake = self._pending, self._wake
        # a decode worker's inputs wait for their KV import (_admit); the others' go to the
        # scheduler here, inline: this loop turns once per step, so it keeps its calls few
        decode, add, rejected = self.config.role == "decode", self.sched.add, self.rejected
        idle_from = -INF if wake is not None else None  # idle since (clock); None: busy
        t = 0.0
        while True:
            if feed.next_s <= t:  # a burst or an input is due (else neither: one check a turn)
                if feed.burst_s <= t:
                    dt = feed.take_bursts(t)
                    if waiting or running:  # they came while the worker was busy
                        t += dt
                        self.busy_s += dt
                if feed.ready_s <= t:  # the inputs due by the clock
                    if decode:
                        pending.extend(feed.take_ready(t))
                    else:
                        for seq in feed.take_ready(t):
                            try:
                                add(seq)
                            except ValueError:  # longer than the KV cache can ever hold
                                rejected.append(seq)
            if pending:
                t = self._admit(pending, t)
            next_s = feed.next_s
            if not (waiting or running):
                if feed.exhausted:
                    break
                if wake is not None and idle_from is None:
                    idle_from = t
                t = max(t, next_s)
                continue
            woke = 0.0
            if idle_from is not None:  # work has found the worker idle: its first step runs
                woke = wake(t - idle_from)  # longer, on the batch there now; what comes
                idle_from = None  # meanwhile waits for the next step (and woke is not busy_s)
            if plan is not None and not waiting:  # (a waiting prompt: no uniform step next)
                k, C = plan(TOKEN)
                if k >= min_macro:
                    t = macro_steps(t, next_s, k, C)
                    continue
            stepped = step(t + woke)  # (woke > 0: a prompt waits, so no macro-step came first)
            if stepped is None:  # nothing schedulable until something arrives
                if feed.exhausted:
                    self.rejected.extend(waiting)
                    break
                t = max(t, next_s)
                continue
            t = stepped
        self.rejected.extend(pending)
        pending.clear()
        for seq_id in list(self._open):
            self._close(seq_id)

    def _macro_plan(self, min_macro: int):
        """The scheduler's uniform_decode_steps() (one call layer less), or None where this
        worker takes no macro-steps: a prefill worker, noisy steps, the single-step baseline."""
        if self.config.role == "prefill" or min_macro >= 10 ** 9 or self._noisy:
            return None
        return self.sched.decode_run.plan

    def _admit(self, pending: deque, t: float) -> float:
        """Hand prefilled sequences to the decode scheduler while it takes them; returns the
        clock after their KV imports."""
        add_prefilled, imp, opened = self.sched.add_prefilled, self._import, self._open
        while pending and add_prefilled(pending[0]):
            seq = pending.popleft()
            opened[seq.seq_id] = self.num_uniform
            self._imported = True
            if imp is not None:  # the KV import holds up the next step (none: no term)
                dt = imp(seq.num_computed_tokens)
                t += dt
                self.busy_s += dt
        return t

    def time_axis(self) -> tuple[np.ndarray, int]:
        """(times, offset): every step's end in step order (seconds), then, from offset on,
        the uniform steps' ends again in uniform order (the axis run starts index). Without
        single steps the two are one array: offset 0."""
        uniform = macro_ends(*map(np_view, (self.macro_t0, self.macro_ctx, self.macro_seqs,
                                            self.macro_len, self.chain_starts)), self._dec)
        if not len(self.single_ends):
            return uniform, 0
        ends = np.empty(self.num_steps)
        is_single = np.ones(self.num_steps, dtype=bool)
        is_single[self.uniform_steps()] = False
        ends[is_single] = np.frombuffer(self.single_ends, dtype=float)
        ends[~is_single] = uniform
        return np.concatenate([ends, uniform]), self.num_steps

    def uniform_steps(self) -> np.ndarray:
        """Step index of each uniform ordinal: the macro-steps' step ranges, concatenated."""
        first, length = np_view(self.macro_first), np_view(self.macro_len)
        return np.repeat(first - (np.cumsum(length) - length), length) + np.arange(length.sum())

    def _prefill_step(self, t: float) -> float | None:
        """_step() for role 'prefill', where every step only prefills: no decode, no
        preemption, every token a first one. Its step ends are not recorded (no token after a
        first one is produced here)."""
        sched = self.sched
        batch = sched.schedule()
        prefill = batch.prefill
        if not prefill:
            return None
        tokens = {}
        Q = _prefill_work(prefill, tokens)
        T = batch.num_prefill_tokens
        dt = self.step_s(T, Q, 0, 0, len(prefill))
        t += dt
        self.busy_s += dt
        self.num_steps += 1
        if T > self.max_prefill_tokens:
            self.max_prefill_tokens = T
        first_s = self.first_s
        for ev in sched.postprocess(batch, tokens):
            first_s[ev.seq_id] = t
        release, prefilled, ready = sched.release, self.prefilled.append, self.prefilled_s.append
        for seq in sched.pop_prefilled():
            release(seq)
            prefilled(seq)
            ready(t)
        return t

    def _step(self, t: float) -> float | None:
        sched, role = self.sched, self.config.role  # 'mixed' or 'decode'
        batch = sched.schedule()
        prefill, decode = batch.prefill, batch.decode
        if not (prefill or decode):
            return None
        T = batch.num_prefill_tokens
        tokens = dict.fromkeys([s.seq_id for s in decode], TOKEN)
        Q = _prefill_work(prefill, tokens)
        B = len(decode)
        C = batch.num_decode_padded_tokens if self._padded else batch.num_decode_ctx_tokens
        if self._by_event:
            dt = self.step_s(T, Q, B, C, len(prefill), self._front_event(t, T, Q, B, C))
        else:
            dt = self.step_s(T, Q, B, C, len(prefill))
        t += dt
        self.busy_s += dt
        idx = self.num_steps
        self.single_ends.append(t)
        self.num_steps += 1
        if T > self.max_prefill_tokens:
            self.max_prefill_tokens = T
        if B > self.max_decode_seqs:
            self.max_decode_seqs = B
        for seq in batch.preempted:
            self._close(seq.seq_id)
        opened = self._open
        for ev in sched.postprocess(batch, tokens):
            seq_id = ev.seq_id
            if ev.index == 0 and role == "mixed":
                self.first_s[seq_id] = t
            else:
                self._close(seq_id)
                self._add_step(seq_id, idx)
                if not ev.finished:
                    opened[seq_id] = self.num_uniform
        # Every running decoding sequence has an open run, also one whose recompute stopped
        # a position short of its tokens (it decodes that one next: no token sampled now).
        for c in prefill:
            seq = c.seq
            if seq.seq_id not in opened and seq.status is RUNNING and seq.is_prefill_done:
                opened[seq.seq_id] = self.num_uniform
        return t

    def _front_event(self, t: float, T: int, Q: float, B: int, C: int) -> bool:
        """Whether the step starting at t (on its curve) meets a front event: one of
        run()'s events_s in [t - LEAD_S, its end], or a KV import just before it."""
        if self._imported:
            self._imported = False
            return True
        ev, j, lo = self._events, self._ej, t - LEAD_S
        while ev[j] < lo:
            j += 1
        self._ej = j
        return ev[j] <= t + self._base_s(T, Q, B, C)

    def _add_step(self, seq_id: str, idx: int) -> None:
        """A token of seq_id at step idx: extends its latest step run when that ends at idx."""
        pos = self._last_run.get(seq_id)
        if (pos is not None and self.run_starts[pos] >= 0
                and self.run_starts[pos] + self.run_counts[pos] == idx):
            self.run_counts[pos] += 1
            return
        self._last_run[seq_id] = len(self.run_ids)
        self.run_ids.append(seq_id)
        self.run_starts.append(idx)
        self.run_counts.append(1)

    def _close(self, seq_id: str) -> None:
        """End seq_id's open uniform run (if any), recording it when it holds tokens."""
        start = self._open.pop(seq_id, None)
        if start is not None and self.num_uniform > start:
            self._last_run[seq_id] = len(self.run_ids)
            self.run_ids.append(seq_id)
            self.run_starts.append(-start - 1)
            self.run_counts.append(self.num_uniform - start)


def _prefill_work(prefill, tokens: dict) -> int:
    """Q of a step's prefill chunks (sum of (start+n)^2 - start^2, the attention work the cost
    model charges); a TOKEN into `tokens` for each chunk that finishes its prompt."""
    Q = 0
    for c in prefill:
        start = c.start
        end = start + c.num_tokens
        Q += end * end - start * start
        if c.is_last:
            tokens[c.seq.seq_id] = TOKEN
    return Q


def np_view(a: array) -> np.ndarray:
    """An array.array's items as a NumPy array, without a copy."""
    return np.frombuffer(a, dtype=a.typecode) if len(a) else np.zeros(0, dtype=a.typecode)
