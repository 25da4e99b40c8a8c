"""Open-loop replay of a workload against an OpenAI-compatible server.

    result = replay(df, "http://127.0.0.1:8000", speed=2.0, token_scale=0.05, store=store)

Each request is sent at t0 + arrival_s / speed on the monotonic clock, whatever happened to the
requests before it (open loop: a slow server gets a growing queue, not a slower client). Sends
are scheduled against absolute times, so sleeping late once does not shift later sends. With
`max_concurrency` a request beyond the cap waits for a slot; that wait shows as send lag.
Ctrl-C (or `stop`) stops sending, lets streams in flight finish for `drain_s`, and keeps every
record. Records go to the store's requests table (source 'replay') under a new run.
"""
from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprobe.workloads.replay_client import request_body, send_one, token_ids

DEFAULT_VOCAB = 512    # used when the server does not say: the reference tiny model's; real vocabularies are larger
SPIN_S = 0.0015        # wake this early and yield until the exact send time (epoll sleeps in whole ms)


@dataclass(frozen=True)
class ReplayResult:
    """records: one row per request sent (requests-table columns plus send_lag_s, the send time
    minus the scheduled time, seconds); interrupted: stopped by Ctrl-C or `stop`."""
    run_id: str
    records: pd.DataFrame
    num_scheduled: int
    interrupted: bool
    wall_s: float

    def status_counts(self) -> dict:
        return self.records["status"].value_counts().to_dict() if len(self.records) else {}


def scaled_lengths(df: pd.DataFrame, token_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths times token_scale, rounded, at least 1 token each."""
    p = np.maximum(1, np.rint(df["prompt_tokens"].to_numpy(dtype=float) * token_scale)).astype(int)
    o = np.maximum(1, np.rint(df["output_tokens"].to_numpy(dtype=float) * token_scale)).astype(int)
    return p, o


def first_model(payload) -> dict:
    """The first entry of a GET /v1/models answer; {} when it lists none."""
    data = (payload.get("data") if isinstance(payload, dict) else None) or [{}]
    return data[0] if isinstance(data[0], dict) else {}


async def discover(session, base: str) -> tuple[str | None, int | None]:
    """(first model id, vocab size if the server lists one) from GET /v1/models; (None, None) if absent."""
    try:
        async with session.get(base + "/v1/models") as resp:
            if resp.status != 200:
                return None, None
            first = first_model(await resp.json())
    except Exception:  # any server: /v1/models is optional, so no answer just means "unknown"
        return None, None
    vocab = first.get("vocab_size") or (first.get("meta") or {}).get("vocab_size")
    return first.get("id"), int(vocab) if isinstance(vocab, int) else None


async def _wait_until(loop, t: float, stop: asyncio.Event) -> None:
    """Return at monotonic time `t`, or as soon as `stop` is set."""
    delay = t - loop.time() - SPIN_S
    if delay > 0:
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return
        except TimeoutError:
            pass
    while loop.time() < t and not stop.is_set():
        await asyncio.sleep(0)


async def _run(df, base, cfg, stop: asyncio.Event, on_record) -> tuple[list[dict], bool]:
    import aiohttp
    loop = asyncio.get_running_loop()
    limit = cfg["max_concurrency"] or 0
    timeout = aiohttp.ClientTimeout(total=cfg["request_timeout_s"], sock_connect=10)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit), timeout=timeout) as session:
        model, vocab = await discover(session, base)
        model, vocab = cfg["model"] or model, cfg["vocab"] or vocab or DEFAULT_VOCAB
        prompts, outputs = scaled_lengths(df, cfg["token_scale"])
        arrivals = df["arrival_s"].to_numpy(dtype=float)
        arrivals = (arrivals - arrivals[0]) / cfg["speed"] if len(arrivals) else arrivals
        rng = np.random.default_rng(cfg["seed"])
        sem = asyncio.Semaphore(limit) if limit else None
        records: list[dict] = []
        tasks: set = set()
        t0 = loop.time() + 0.05

        async def one(i: int, due: float) -> None:
            if sem:
                await sem.acquire()
            try:
                rec = {"run_id": cfg["run_id"], "source": "replay", "request_id": f"{cfg['run_id']}-{i}",
                       "model": model, "workload": cfg["workload"], "prompt_tokens": int(prompts[i])}
                lag = loop.time() - due
                body = request_body(model, token_ids(rng, int(prompts[i]), vocab), int(outputs[i]))
                rec = await send_one(session, base + "/v1/completions", body, rec)
                rec["send_lag_s"] = lag
                records.append(rec)
                on_record(rec)
            finally:
                if sem:
                    sem.release()

        for i, at in enumerate(arrivals):
            due = t0 + at
            await _wait_until(loop, due, stop)
            if stop.is_set():
                break
            task = asyncio.create_task(one(i, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        interrupted = stop.is_set()
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=cfg["drain_s"] if interrupted else None)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    return records, interrupted


def replay(workload_df: pd.DataFrame, target_url: str, *, speed: float = 1.0, token_scale: float = 1.0,
           limit: int | None = None, max_concurrency: int | None = None, model: str | None = None,
           vocab: int | None = None, store=None, run_id: str | None = None, workload: str | None = None,
           progress: bool = False, stop: threading.Event | None = None, drain_s: float = 5.0,
           request_timeout_s: float = 600.0, seed: int = 0) -> ReplayResult:
    """Replay `workload_df` (arrival_s s, prompt_tokens, output_tokens) against `target_url`.

    Blocking (runs its own event loop). With `store`, records go to its requests table as they
    arrive in batches, and the run is registered with start_run/end_run.
    """
    if speed <= 0 or token_scale <= 0:
        raise ValueError("speed and token_scale must be positive")
    from gpuprobe.workloads.loading import by_arrival
    df = by_arrival(workload_df).iloc[:limit or None]  # a loaded workload is in order already
    run_id = run_id or f"replay-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    cfg = dict(speed=speed, token_scale=token_scale, max_concurrency=max_concurrency, model=model, vocab=vocab,
               run_id=run_id, workload=workload, drain_s=drain_s, request_timeout_s=request_timeout_s, seed=seed)
    from gpuprobe.workloads.replay_sink import RecordSink
    sink = RecordSink(store, run_id, len(df), progress, meta={**cfg, "target": target_url, "num_requests": len(df)})
    started = time.time()
    try:
        records, interrupted = asyncio.run(_main(df, target_url.rstrip("/"), cfg, stop, sink))
    finally:
        sink.close()
    out = pd.DataFrame(records)
    if len(out):
        out["token_times"] = out["token_times"].map(list)
        out = out.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    return ReplayResult(run_id, out, len(df), interrupted, time.time() - started)


async def _main(df, base, cfg, stop_thread: threading.Event | None, sink):
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    watcher = None
    if stop_thread is not None:
        async def watch():
            while not stop_thread.is_set():
                await asyncio.sleep(0.05)
            stop.set()
        watcher = asyncio.create_task(watch())
    try:
        return await _run(df, base, cfg, stop, sink.add)
    finally:
        if watcher:
            watcher.cancel()
        if in_main:
            loop.remove_signal_handler(signal.SIGINT)
