"""One simulated engine worker: the real Scheduler, a cost model for the runner, a virtual clock.

The worker is fed (ready_s, Sequence) inputs in time order: new requests for roles 'mixed'
and 'prefill', prefilled sequences for role 'decode'. Each step asks the shared Scheduler for
a batch, advances the clock by the cost model's step time, and hands the Scheduler a token per
sequence (postprocess), exactly as the reference server's engine does with real forward passes.

Speed: when nothing can change the batch for a while (no input due, nothing waiting, every
running sequence decoding and none about to finish or to run out of KV blocks) the worker
advances K identical decode steps at once: the same per-sequence effects (tokens, KV progress,
blocks) and the same step times as K single steps, without K schedule() calls.
"""
from __future__ import annotations

from collections import deque

from gpuprobe.engine.scheduler import Scheduler, SchedulerConfig
from gpuprobe.engine.sequence import Sequence
from gpuprobe.perf.costmodel import StepCost

MIN_MACRO_STEPS = 2


class SimEngine:
    """Runs `inputs` to completion; records token times on the virtual clock (seconds).

    After run(): first_s[seq_id] is the engine time of each request's first token produced
    here (index 0), ends is every step's end time, runs[seq_id] lists (first step, count) pairs
    of the steps that gave it its later tokens, prefilled is [(ready_s, seq)] for role
    'prefill', and num_steps / num_macro_steps count what happened.
    """

    def __init__(self, config: SchedulerConfig, cost: StepCost):
        self.config = config
        self.sched = Scheduler(config)
        self.step_s = cost.step_fn()
        self.k0, self.k1, self.k2 = cost.decode_coefs()
        self.first_s: dict[str, float] = {}
        self.ends: list[float] = []
        self.runs: dict[str, list[int]] = {}
        self.prefilled: list[tuple[float, Sequence]] = []
        self.rejected: list[Sequence] = []
        self.num_steps = 0
        self.num_macro_steps = 0
        self.max_prefill_tokens = 0
        self.max_decode_seqs = 0

    def run(self, inputs: list[tuple[float, Sequence]]) -> None:
        sched, role = self.sched, self.config.role
        pending: deque[Sequence] = deque()
        n, i, t = len(inputs), 0, 0.0
        while True:
            while i < n and inputs[i][0] <= t:
                self._feed(inputs[i][1], pending)
                i += 1
            while pending and sched.add_prefilled(pending[0]):
                pending.popleft()
            next_s = inputs[i][0] if i < n else float("inf")
            if not sched.has_unfinished():
                if i >= n:
                    break
                t = max(t, next_s)
                continue
            if role != "prefill" and self._macro(t, next_s):
                t = self.ends[-1]
                continue
            stepped = self._step(t)
            if stepped is None:  # nothing schedulable until something arrives
                if i >= n:
                    self.rejected.extend(sched.waiting)
                    break
                t = max(t, next_s)
                continue
            t = stepped
        self.rejected.extend(pending)

    def _feed(self, seq: Sequence, pending: deque) -> None:
        if self.config.role == "decode":
            pending.append(seq)
            return
        try:
            self.sched.add(seq)
        except ValueError:  # longer than the KV cache can ever hold
            self.rejected.append(seq)

    def _step(self, t: float) -> float | None:
        sched = self.sched
        batch = sched.schedule()
        if batch.is_empty:
            return None
        T, Q = batch.num_prefill_tokens, 0
        for c in batch.prefill:
            Q += (c.start + c.num_tokens) ** 2 - c.start ** 2
        B = len(batch.decode)
        t += self.step_s(T, Q, B, batch.num_decode_ctx_tokens)
        tokens = {c.seq.seq_id: 1 for c in batch.prefill if c.is_last}
        for s in batch.decode:
            tokens[s.seq_id] = 1
        idx = len(self.ends)
        self.ends.append(t)
        self.num_steps += 1
        self.max_prefill_tokens = max(self.max_prefill_tokens, T)
        self.max_decode_seqs = max(self.max_decode_seqs, B)
        for ev in sched.postprocess(batch, tokens):
            if ev.index == 0 and self.config.role != "decode":
                self.first_s[ev.seq_id] = t
            else:
                self._add_run(ev.seq_id, idx, 1)
        if self.config.role == "prefill":
            for seq in sched.pop_prefilled():
                sched.release(seq)
                self.prefilled.append((t, seq))
        return t

    def _add_run(self, seq_id: str, idx: int, count: int) -> None:
        r = self.runs.get(seq_id)
        if r is None:
            self.runs[seq_id] = [idx, count]
        elif r[-2] + r[-1] == idx:
            r[-1] += count
        else:
            r += (idx, count)

    def _macro(self, t: float, next_s: float) -> bool:
        """Advance several identical decode steps at once; False when that is not exact."""
        sched, cfg = self.sched, self.config
        running = sched.running
        B = len(running)
        if sched.waiting or not B or B > cfg.max_num_seqs or (
                cfg.chunked_prefill_tokens is not None and B > cfg.chunked_prefill_tokens):
            return False
        k = 1 << 30
        C = 0
        for s in running:
            # Inlined Sequence properties: this loop is the simulator's hot path.
            n_tok = len(s.token_ids)
            done = s.num_computed_tokens
            if done < n_tok - 1 or n_tok == s.num_prompt_tokens:
                return False  # a prompt still prefilling
            left = s.params.max_tokens - n_tok + s.num_prompt_tokens
            if left < k:
                k = left
            C += done + 1
        k -= 1  # the step that finishes a sequence goes through schedule()/postprocess()
        if k < MIN_MACRO_STEPS:
            return False
        # Steps until the next input is due: step j starts at the end of step j-1.
        k0 = self.k0 + self.k1 * B
        k2, ends, K = self.k2, [], 0
        while K < k:
            t += k0 + k2 * C
            ends.append(t)
            K += 1
            C += B
            if t >= next_s:
                break
        if K < MIN_MACRO_STEPS:
            return False
        bm = sched.block_manager
        bs = bm.block_size
        grow = []
        need = 0
        for s in running:
            n = -(-(s.num_computed_tokens + K) // bs) - len(s.block_table)
            if n > 0:
                need += n
                grow.append(s)
        if need > bm.num_free_blocks:
            return False  # a preemption is coming: let the scheduler do it step by step
        for s in grow:
            bm.allocate(s, K)
        idx = len(self.ends)
        self.ends += ends
        ones = [1] * K
        runs = self.runs
        for s in running:
            s.num_computed_tokens += K
            s.token_ids += ones
            r = runs[s.seq_id] if s.seq_id in runs else None
            if r is not None and r[-2] + r[-1] == idx:
                r[-1] += K
            elif r is None:
                runs[s.seq_id] = [idx, K]
            else:
                r += (idx, K)
        self.num_steps += K
        self.num_macro_steps += 1
        self.max_decode_seqs = max(self.max_decode_seqs, B)
        return True
