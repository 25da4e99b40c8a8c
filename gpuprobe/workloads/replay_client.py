"""One replayed request: a token-id prompt of exactly N tokens, a forced output length, and the
client-side timing of every streamed token.

The body is OpenAI /v1/completions: `prompt` as a list of token ids (so the length is exact
whatever the tokenizer), `max_tokens` with `ignore_eos: true` (vLLM, SGLang and the reference
server honour it), `stream: true` with `stream_options.include_usage` and
`continuous_usage_stats` (vLLM's: a chunk per token, each with the usage so far, so every token
is timed even where its bytes complete no character).
"""
from __future__ import annotations

import json
import time

import numpy as np

FIRST_SAFE_ID = 100  # below this many vocabularies keep special and control tokens


def token_ids(rng: np.random.Generator, num_tokens: int, vocab: int) -> list[int]:
    low = FIRST_SAFE_ID if vocab > 2 * FIRST_SAFE_ID else 0
    return rng.integers(low, max(vocab, low + 1), size=num_tokens).tolist()


def request_body(model: str | None, prompt_ids: list[int], max_tokens: int) -> dict:
    body = {"prompt": prompt_ids, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if model:
        body["model"] = model
    return body


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def finish_record(rec: dict, send_wall_s: float, offsets: list[float], status: str, error: str | None) -> dict:
    """Fill timing columns of a requests-table record from token arrival offsets (s from send)."""
    gaps = np.diff(np.asarray(offsets)) if len(offsets) > 1 else np.array([])
    end = time.time()
    rec.update(arrival_s=send_wall_s, output_tokens=len(offsets), token_times=[round(t, 6) for t in offsets],
               first_token_s=send_wall_s + offsets[0] if offsets else None,
               ttft_s=offsets[0] if offsets else None, tbt_p50_s=_pct(gaps, 50), tbt_p99_s=_pct(gaps, 99),
               tbt_max_s=float(gaps.max()) if gaps.size else None, finish_s=end, e2e_s=end - send_wall_s,
               status=status, error=error)
    return rec


async def send_one(session, url: str, body: dict, rec: dict) -> dict:
    """POST and read the stream; never raises for HTTP or connection faults (they become status)."""
    import aiohttp
    offsets: list[float] = []
    send_wall, t0 = time.time(), time.perf_counter()
    status, error, done = "ok", None, False
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                return finish_record(rec, send_wall, offsets, f"http_{resp.status}", text or None)
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("choices"):
                    offsets.append(time.perf_counter() - t0)
        if not done:
            status, error = "error", f"stream ended without [DONE] after {len(offsets)} tokens"
    except (aiohttp.ClientError, ConnectionError, TimeoutError, ValueError) as exc:
        status, error = "error", f"{type(exc).__name__}: {exc}"[:300]
    return finish_record(rec, send_wall, offsets, status, error)
