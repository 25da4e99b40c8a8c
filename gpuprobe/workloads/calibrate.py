"""Calibration load for a live server: prefill sweeps (one request at a time, max_tokens=1)
and decode bursts (B concurrent streams). Client-side timings of every token come back.

Uses the replay client (token-id prompts of exact length, ignore_eos, streaming), so what is
measured is what a replay of a workload sees: HTTP, the front end, IPC and the engine.
"""
from __future__ import annotations

import asyncio
import time

import numpy as np

from gpuprobe.errors import GpuprobeError

PREFILL_SIZES = (16, 32, 64, 128, 256, 384, 512, 768, 1024)
LONG_PREFILLS = (1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64)  # up to max_num_seqs: no extrapolation
DECODE_PROMPTS = (32, 320)
DECODE_TOKENS = 24
# Idle probes (wake.py): prompts of these sweep sizes, each sent after this many seconds with
# the server idle, WAKE_REPS rounds: about 3 s a pass. Each asks for WAKE_TOKENS tokens: the
# second makes a split layout hand the probe's KV over with nothing else in flight, the lone
# handoffs the link is fitted on (profile_fit.fit_link).
WAKE_GAPS = (0.03, 0.1, 0.3)
WAKE_SIZES = (64, 128, 256)
WAKE_REPS = 2
WAKE_TOKENS = 2


def prefill_sizes_for(max_prompt: int, max_len: int) -> tuple[int, ...]:
    """PREFILL_SIZES, extended with LONG_PREFILLS until they cover max_prompt tokens (each at
    most max_len): the prefill fit is then measured over every length a workload replays, not
    extrapolated past 1,024 tokens, where attention's T^2 term takes over on a GPU."""
    sizes = [n for n in PREFILL_SIZES if n <= max_len]
    for n in LONG_PREFILLS:
        if sizes and sizes[-1] >= min(max_prompt, max_len):
            break
        sizes.append(min(n, max_len))
    return tuple(dict.fromkeys(sizes))


LONG_DECODE_MAX_BATCH = 16  # bursts at a context past DECODE_PROMPTS' go up to this batch


def decode_batches_for(max_batch: int) -> tuple[int, ...]:
    """DECODE_BATCHES up to max_batch, and max_batch itself: the decode fit then reaches the
    largest batch asked for (its x_max), and predictions past 1.5 times it are flagged."""
    return tuple(dict.fromkeys([b for b in DECODE_BATCHES if b < max_batch] + [max_batch]))


def _batches_at(prompt: int, batches) -> tuple[int, ...]:
    """The burst sizes at a decode prompt: all of them at DECODE_PROMPTS' lengths; at a longer
    one (decode_prompts_for) up to LONG_DECODE_MAX_BATCH, which measures the context term
    without prefilling 64 long prompts per burst (the batch term is measured at the short
    ones)."""
    if prompt <= max(DECODE_PROMPTS):
        return tuple(batches)
    return tuple(b for b in batches if b <= LONG_DECODE_MAX_BATCH) or tuple(batches[:1])


def decode_prompts_for(contexts, max_len: int, tokens: int = DECODE_TOKENS) -> tuple[int, ...]:
    """DECODE_PROMPTS, plus the workload's median decode context (prompt + half its output,
    `contexts`) where that is past twice the longest of them: the decode curve's context term
    is then measured where the workload decodes rather than extrapolated from short bursts
    (a workload of prompts ten times Azure's decodes at 5x the contexts DECODE_PROMPTS
    reach). At most half the model's context, so the largest burst fits the server's
    default KV cache."""
    prompts = [n for n in DECODE_PROMPTS if n + tokens < max_len]
    mid = int(np.median(np.asarray(contexts, dtype=float))) if len(contexts) else 0
    if prompts and mid > 2 * prompts[-1]:
        prompts.append(max(prompts[-1] + 1, min(mid, max_len // 2 - tokens)))
    return tuple(prompts)


def server_model(base_url: str, timeout_s: float = 10.0) -> dict:
    """The first entry of the server's GET /v1/models; {} when it lists none or does not answer
    (the endpoint is optional, and an unreachable server fails the calibration itself)."""
    import json
    import urllib.request

    from gpuprobe.workloads.replay import first_model

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=timeout_s) as r:
            return first_model(json.load(r))
    except (OSError, ValueError):
        return {}


async def _session_run(base: str, fn, timeout_s: float):
    import aiohttp

    from gpuprobe.workloads.replay import discover

    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        model, vocab = await discover(session, base)
        return await fn(session, model, vocab)


def _check(recs: list[dict], what: str) -> list[dict]:
    bad = [r for r in recs if r["status"] != "ok"]
    if bad:
        raise GpuprobeError(f"{what}: {len(bad)} of {len(recs)} calibration requests failed "
                            f"(first: {bad[0]['status']} {bad[0].get('error') or ''})".strip())
    return recs


def run_calibration(base_url: str, prefill_sizes=PREFILL_SIZES, decode_batches=DECODE_BATCHES,
                    decode_prompts=DECODE_PROMPTS, decode_tokens: int = DECODE_TOKENS,
                    reps: int = 4, timeout_s: float = 120.0, progress=None,
                    vocab: int | None = None, wake_gaps=WAKE_GAPS, wake_reps: int = WAKE_REPS,
                    detail=None, keep_partial: bool = False, mixed_prompts=()) -> dict:
    """Send the calibration load; returns {'prefill': [rec], 'decode': [(B, L, [rec])],
    'wake': [rec], 't0_s', 't1_s'} with replay-client records (ttft_s, token_times in s from
    send). The idle probes ('wake', each with its idle_s) come after t1_s, the end of the
    sweeps: the step records a fit reads end there, so the probes' slow steps stay out of it.

    progress(msg) hears of each prefill repetition, each decode prompt length and the idle
    probes (validate times its CPU phases by these); detail(msg), when given, of each decode
    burst as well. keep_partial: a decode burst that fails after two smaller ones succeeded at
    its prompt length ends that prompt's bursts instead of the calibration; 'cut' says which.

    Raises GpuprobeError when the server cannot be reached or a request fails.
    """
    from gpuprobe.workloads.replay import DEFAULT_VOCAB
    from gpuprobe.workloads.replay_client import request_body, send_one, token_ids

    base = base_url.rstrip("/")
    rng = np.random.default_rng(0)
    note = progress or (lambda msg: None)
    cut: list[str] = []

    async def go(session, model, found_vocab):
        vocab_n = vocab or found_vocab or DEFAULT_VOCAB  # the server's, else replay's safe range
        def body(n_prompt, n_out):
            return request_body(model, token_ids(rng, n_prompt, vocab_n), n_out)

        # Warm-up: first-call costs (allocator, thread pools) are not the steady state.
        warm = await send_one(session, base + "/v1/completions", body(64, 4), {})
        _check([warm], f"cannot profile {base}: warm-up request")
        prefill = []
        for rep in range(reps):
            for n in prefill_sizes:
                prefill.append(await send_one(session, base + "/v1/completions", body(n, 1),
                                              {"prompt_tokens": n}))
            note(f"prefill sweep {rep + 1}/{reps}")
        _check(prefill, "prefill sweep")
        decode = await _decode_sweep(session, base + "/v1/completions", body, decode_prompts,
                                     decode_batches, decode_tokens, keep_partial, note, detail, cut)
        t_sweeps = time.time()
        sizes = [n for n in WAKE_SIZES if n in prefill_sizes]
        wake = []
        for _ in range(wake_reps if sizes else 0):
            for gap in wake_gaps:
                for n in sizes:
                    await asyncio.sleep(gap)
                    wake.append(await send_one(session, base + "/v1/completions",
                                               body(n, WAKE_TOKENS),
                                               {"prompt_tokens": n, "idle_s": gap}))
        if wake:
            note("idle probes")
        _check(wake, "idle probes")
        mixed = []
        if mixed_prompts:
            from gpuprobe.workloads.mixed_sweep import MIXED_BATCH, mixed_runs, wait_for

            batch = min(MIXED_BATCH, max(decode_batches))
            mixed = await mixed_runs(session, base + "/v1/completions", body, mixed_prompts,
                                     batch, wait_for(decode, batch))
            note(f"mixed sweep: prompts of {', '.join(map(str, mixed_prompts))} tokens into "
                 f"{batch} decoding streams")
        return prefill, decode, wake, t_sweeps, mixed

    t0 = time.time()
    try:
        prefill, decode, wake, t1, mixed = asyncio.run(_session_run(base, go, timeout_s))
    except GpuprobeError:
        raise
    except Exception as exc:  # connection refused, DNS, timeouts: one line for the user
        raise GpuprobeError(f"cannot profile {base}: {type(exc).__name__}: {exc}") from None
    return {"prefill": prefill, "decode": decode, "wake": wake, "t0_s": t0, "t1_s": t1, "cut": cut,
            "mixed": mixed}


async def _decode_sweep(session, url: str, body, prompts, batches, tokens: int, keep_partial: bool,
                        note, detail, cut: list) -> list:
    """Decode bursts: at each prompt length, B streams at once for each B of `batches` that fits;
    returns [(B, L, [rec])]. A failed burst raises, or with keep_partial after two smaller
    ones succeeded ends that prompt's bursts, noted in `cut`."""
    from gpuprobe.workloads.replay_client import send_one

    decode, n = [], 0
    bursts = sum(len(_batches_at(L, batches)) for L in prompts)
    for L in prompts:
        fitted = 0
        for B in _batches_at(L, batches):
            t_burst, n = time.monotonic(), n + 1
            recs = list(await asyncio.gather(*(send_one(session, url, body(L, tokens), {"prompt_tokens": L})
                                               for _ in range(B))))
            bad = [r for r in recs if r["status"] != "ok"]
            if bad and keep_partial and fitted >= 2:
                # a slow or busy server times the largest bursts out: keep the smaller ones
                # (the fit's x_max says where it stops) rather than fail the whole profile
                cut.append(f"decode burst of {B} streams at prompt {L} failed ({len(bad)} of {B}: "
                           f"{bad[0]['status']} {bad[0].get('error') or ''}".rstrip() +
                           f"); larger bursts at this prompt left out")
                note(cut[-1])
                break
            decode.append((B, L, _check(recs, f"decode burst B={B}")))
            fitted += 1
            if detail:  # the large bursts take longest: a user sees which one is running
                detail(f"decode burst {n}/{bursts}: {B} streams at prompt {L} "
                       f"in {time.monotonic() - t_burst:.1f} s")
        # one note per prompt length: validate times its CPU phases by these notes
        note(f"decode sweep, prompt {L}")
    return decode


def client_prefill_points(cal: dict) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, TTFT s) from the prefill sweep: engine prefill plus front-end cost."""
    recs = cal["prefill"]
    return (np.array([r["prompt_tokens"] for r in recs], float),
            np.array([r["ttft_s"] for r in recs], float))


def client_decode_points(cal: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, C at mid-stream, median TBT s) per decode burst: the decode step plus the loop gap."""
    Bs, Cs, ys = [], [], []
    for B, L, recs in cal["decode"]:
        gaps = np.concatenate([np.diff(r["token_times"]) for r in recs if len(r["token_times"]) > 2])
        Bs.append(B)
        Cs.append(B * (L + len(recs[0]["token_times"]) / 2))
        ys.append(float(np.median(gaps)))
    return np.array(Bs, float), np.array(Cs, float), np.array(ys, float)
