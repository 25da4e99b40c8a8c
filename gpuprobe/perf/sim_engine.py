"""One simulated engine worker: the real Scheduler, a cost model for the runner, a virtual clock.

The worker is fed (ready_s, Sequence) inputs in time order: new requests for roles 'mixed'
and 'prefill', prefilled sequences for role 'decode'. Each step asks the shared Scheduler for
a batch, advances the clock by the cost model's step time, and hands the Scheduler a token per
sequence (postprocess), exactly as the reference server's engine does with real forward passes.

Speed: when the Scheduler says the next k steps are the same all-decode batch
(uniform_decode_steps), the worker takes as many of them as end before the next input is due
in one macro-step (advance_decodes): the same step times, bit for bit, and the same effects as
single steps, without a schedule() call or a TokenEvent per step.

Token times are kept compact, never per token: each request's later tokens are runs of
consecutive steps. A run in the uniform decode steps (every decoding sequence took part) is
opened when a sequence starts decoding and closed when it finishes, is preempted or gets a
token in a single step; so a macro-step costs nothing per sequence here.
"""
from __future__ import annotations

from array import array
from collections import deque

from gpuprobe.engine.scheduler import Scheduler, SchedulerConfig
from gpuprobe.engine.sequence import SeqStatus, Sequence
from gpuprobe.perf.costmodel import StepCost

MIN_MACRO_STEPS = 1  # the bench and tests set it out of reach to get the single-step baseline
TOKEN = 1            # every simulated token; the trace fixes lengths (ignore_eos)
RUNNING = SeqStatus.RUNNING


class SimEngine:
    """Runs `inputs` to completion; records token times on the virtual clock (seconds).

    After run(): first_s[seq_id] is the engine time of each request's first token produced
    here (index 0); ends is every step's end time; the macro-steps took steps
    [macro_first[m], macro_first[m] + macro_len[m]), num_uniform of them in all (the uniform
    decode steps, numbered in that order: their ordinals); run_ids / run_starts /
    run_counts are the runs of each request's later tokens in time order per request: a
    start >= 0 is a step index, a start < 0 is uniform ordinal -start - 1. prefilled is
    [(ready_s, seq)] for role 'prefill'; num_steps / num_macro_steps count what happened.
    """

    def __init__(self, config: SchedulerConfig, cost: StepCost):
        self.config = config
        self.sched = Scheduler(config)
        self.step_s = cost.step_fn()
        # step_fn's decode-only formula, unrolled into _macro with the same operation order.
        self._dec = (*cost.decode.coef, cost.step_overhead_s, cost.scale)
        self._import = cost.import_fn() if config.role == "decode" else None
        self.first_s: dict[str, float] = {}
        # Doubles, not a list of floats: ~0.5 M of them per hour of trace, no float objects kept.
        self.ends = array("d")
        self.macro_first: list[int] = []
        self.macro_len: list[int] = []
        self.num_uniform = 0
        self.run_ids: list[str] = []
        self.run_starts: list[int] = []
        self.run_counts: list[int] = []
        self._open: dict[str, int] = {}  # seq_id -> uniform ordinal its open run starts at
        self._last_run: dict[str, int] = {}  # seq_id -> position of its latest step run
        self.prefilled: list[tuple[float, Sequence]] = []
        self.rejected: list[Sequence] = []
        self.num_steps = 0
        self.num_macro_steps = 0
        self.busy_s = 0.0  # clock time spent in steps and imports (the worker's utilisation)
        self.max_prefill_tokens = 0
        self.max_decode_seqs = 0

    def run(self, inputs: list[tuple[float, Sequence]]) -> None:
        sched, role = self.sched, self.config.role
        waiting, running = sched.waiting, sched.running
        macro = role != "prefill" and MIN_MACRO_STEPS < 10 ** 9
        pending: deque[Sequence] = deque()
        n, i, t = len(inputs), 0, 0.0
        while True:
            while i < n and inputs[i][0] <= t:
                self._feed(inputs[i][1], pending)
                i += 1
            imp = self._import
            while pending and sched.add_prefilled(pending[0]):
                seq = pending.popleft()
                self._open[seq.seq_id] = self.num_uniform
                if imp is not None:  # the KV import holds up the next step (none: no term)
                    dt = imp(seq.num_computed_tokens)
                    t += dt
                    self.busy_s += dt
            next_s = inputs[i][0] if i < n else float("inf")
            if not (waiting or running):
                if i >= n:
                    break
                t = max(t, next_s)
                continue
            if macro and not waiting:  # (a waiting prompt: the next step is no uniform one)
                k, ctx = sched.uniform_decode_steps(TOKEN)
                if k >= MIN_MACRO_STEPS:
                    t = self._macro(t, next_s, k, ctx)
                    continue
            stepped = self._step(t)
            if stepped is None:  # nothing schedulable until something arrives
                if i >= n:
                    self.rejected.extend(waiting)
                    break
                t = max(t, next_s)
                continue
            t = stepped
        self.rejected.extend(pending)
        for seq_id in list(self._open):
            self._close(seq_id)

    def _feed(self, seq: Sequence, pending: deque) -> None:
        if self.config.role == "decode":
            pending.append(seq)
            return
        try:
            self.sched.add(seq)
        except ValueError:  # longer than the KV cache can ever hold
            self.rejected.append(seq)

    def _macro(self, t: float, next_s: float, k: int, C: int) -> float:
        """Take up to k uniform decode steps, stopping after the first that ends at or after
        next_s (the next input joins before the step after it). Returns the clock."""
        B = len(self.sched.running)
        d0, d1, d2, ovh, scale = self._dec
        x = d0 + d1 * B
        t0 = t
        ends = self.ends
        append = ends.append
        first = len(ends)
        for c in range(C, C + k * B, B):  # c: the step's KV positions
            t += (x + d2 * c + ovh) * scale  # == step_s(0, 0, B, c), bit for bit
            append(t)
            if t >= next_s:
                break
        K = len(ends) - first
        self.busy_s += t - t0
        finished = self.sched.advance_decodes(K, TOKEN)
        self.macro_first.append(first)
        self.macro_len.append(K)
        self.num_uniform += K
        for seq in finished:
            self._close(seq.seq_id)
        self.num_steps += K
        self.num_macro_steps += 1
        if B > self.max_decode_seqs:
            self.max_decode_seqs = B
        return t

    def _step(self, t: float) -> float | None:
        sched, role = self.sched, self.config.role
        batch = sched.schedule()
        prefill, decode = batch.prefill, batch.decode
        if not (prefill or decode):
            return None
        T, Q = batch.num_prefill_tokens, 0
        tokens = dict.fromkeys([s.seq_id for s in decode], TOKEN)
        for c in prefill:
            start = c.start
            end = start + c.num_tokens
            Q += end * end - start * start
            if c.is_last:
                tokens[c.seq.seq_id] = TOKEN
        B = len(decode)
        dt = self.step_s(T, Q, B, batch.num_decode_ctx_tokens)
        t += dt
        self.busy_s += dt
        idx = len(self.ends)
        self.ends.append(t)
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
            if ev.index == 0 and role != "decode":
                self.first_s[seq_id] = t
            else:
                self._close(seq_id)
                self._add_step(seq_id, idx)
                if not ev.finished:
                    opened[seq_id] = self.num_uniform
        if role == "prefill":
            for seq in sched.pop_prefilled():
                sched.release(seq)
                self.prefilled.append((t, seq))
            return t
        # Every running decoding sequence has an open run, also one whose recompute stopped
        # a position short of its tokens (it decodes that one next: no token sampled now).
        for c in prefill:
            seq = c.seq
            if seq.seq_id not in opened and seq.status is RUNNING and seq.is_prefill_done:
                opened[seq.seq_id] = self.num_uniform
        return t

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
