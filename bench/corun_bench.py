"""How much two engine workers pinned to two cores slow each other: a split layout's
prefill and decode workers on one host, without the server's front, client or pipes.

    .venv/bin/python bench/corun_bench.py [--rounds 8] [--window 0.6]

Worker A (its own process, pinned to the first core) times engine steps of one shape;
worker B (its own process, pinned to the second core) runs the other phase in a loop that
is switched on and off. This machine's cores change speed by 10-50% within seconds on their
own, so each shape is timed in short windows, alone and beside B in turn, --rounds times:
each window beside B against the mean of the windows alone either side of it, and the
median of those ratios with its range printed. Both directions: prefill steps beside a
decode loop of 1 and 8 sequences, decode steps of 1 and 8 sequences beside a loop of
256-token prefills, and each beside a core kept busy by a Python loop that touches almost
no memory (is it the work beside, or only a busy core?). Tiny model, one torch thread per
worker, as `gpuprobe serve` runs a split layout on the CPU. The bench is not a test: it
prints figures and ratios.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

PROMPT = 100  # tokens of each decoding sequence's prompt


def _engine(core: int):
    os.sched_setaffinity(0, {core})
    import torch

    torch.set_num_threads(1)
    from gpuprobe.engine import LLMEngine, SamplingParams, Scheduler, SchedulerConfig, Sequence
    from gpuprobe.llama.runner import ModelRunner, load_model

    config, model, _ = load_model("tiny", "cpu", torch.float32)
    runner = ModelRunner(config, 512, 16, "cpu", 1, torch.float32, model)
    cfg = SchedulerConfig(num_blocks=512, block_size=16)

    def new(prompts: list[int], max_tokens: int):
        eng = LLMEngine(Scheduler(cfg), runner)
        for i, n in enumerate(prompts):
            eng.add_request(Sequence(f"s{i}", list(range(1, n + 1)),
                                     SamplingParams(max_tokens=max_tokens, ignore_eos=True)))
        return eng
    return new


def _background(core: int, kind: str, size: int, on, quit_) -> None:
    """Runs `kind` work while `on` is set, until `quit_` is."""
    os.sched_setaffinity(0, {core})
    new = None if kind == "spin" else _engine(core)
    eng = None
    while not quit_.is_set():
        if not on.wait(0.01):
            continue
        if kind == "spin":
            x = 0
            for i in range(20_000):
                x += i
        elif kind == "prefill":
            new([size], 1).step()
        else:
            if eng is None or not eng.has_unfinished():
                eng = new([PROMPT] * size, 400)
            eng.step()


def _timer(core: int, conn) -> None:
    """Answers (kind, size, seconds) with the median step time of that shape, in s."""
    new = _engine(core)
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        kind, size, seconds = msg
        times, t_end = [], time.monotonic() + seconds
        while time.monotonic() < t_end:
            if kind == "prefill":
                eng = new([size], 1)
                t0 = time.perf_counter()
                eng.step()
                times.append(time.perf_counter() - t0)
            else:
                eng = new([PROMPT] * size, 40)
                eng.step()  # the prefill, not timed
                while eng.has_unfinished() and time.monotonic() < t_end:
                    t0 = time.perf_counter()
                    eng.step()
                    times.append(time.perf_counter() - t0)
        conn.send(statistics.median(times))


CASES = [("prefill", 128, "decode", 1), ("prefill", 128, "decode", 8),
         ("prefill", 256, "decode", 8), ("prefill", 128, "spin", 0),
         ("decode", 1, "prefill", 256), ("decode", 8, "prefill", 256),
         ("decode", 1, "spin", 0)]


def _label(kind: str, size: int) -> str:
    if kind == "spin":
        return "a Python loop"
    return f"{kind} {size} {'tokens' if kind == 'prefill' else 'seqs'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="windows beside, each between two alone")
    ap.add_argument("--window", type=float, default=0.6, help="seconds per timing window")
    args = ap.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("corun_bench: needs two cores; this process may use one")
        return 0
    a, b = cores[0], cores[1]
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    timer = ctx.Process(target=_timer, args=(a, there), daemon=True)
    timer.start()
    here.recv()

    def timed(kind, size):
        here.send((kind, size, args.window))
        return here.recv()

    print(f"cores {a} (timed) and {b} (beside); {args.rounds} rounds of {args.window:.1f} s windows")
    print(f"{'timed step':<20} {'beside':<20} {'alone ms':>9} {'beside ms':>10} "
          f"{'ratio':>6}  {'range':>11}")
    for kind, size, other, osize in CASES:
        on, quit_ = ctx.Event(), ctx.Event()
        bg = ctx.Process(target=_background, args=(b, other, osize, on, quit_), daemon=True)
        bg.start()
        on.set()
        time.sleep(2.5)  # its model loaded and stepping
        on.clear()
        alone, beside = [timed(kind, size)], []
        for _ in range(args.rounds):
            on.set()
            time.sleep(0.05)
            beside.append(timed(kind, size))
            on.clear()
            time.sleep(0.05)
            alone.append(timed(kind, size))
        quit_.set()
        bg.join()
        ratios = [x / ((p + q) / 2) for x, p, q in zip(beside, alone, alone[1:])]
        print(f"{_label(kind, size):<20} {_label(other, osize):<20} "
              f"{statistics.median(alone) * 1e3:>9.2f} {statistics.median(beside) * 1e3:>10.2f} "
              f"{statistics.median(ratios):>6.2f}  {min(ratios):>5.2f}-{max(ratios):<5.2f}",
              flush=True)
    here.send(None)
    timer.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
