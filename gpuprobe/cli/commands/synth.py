"""`gpuprobe synth`: make a synthetic workload and save it like an import."""
from __future__ import annotations

import json

from gpuprobe.argtypes import nonneg_int, positive_float

NAME = "synth"
HELP = "generate a synthetic workload (Poisson or gamma arrivals, resampled lengths, mix shift, daily cycle)"


def add_arguments(p) -> None:
    p.add_argument("--name", required=True, help="workload name to save it under")
    p.add_argument("--rate", type=positive_float, default=2.0, help="mean arrival rate, requests/s (default 2)")
    p.add_argument("--duration", default="600s", help="length of the workload (default 600s)")
    p.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson", help="arrival process")
    p.add_argument("--cv", type=positive_float, default=1.0, help="gamma: coefficient of variation of gaps, 0.01-100 (>1 bursty)")
    p.add_argument("--lengths-from", default="azure-conv",
                   help="workload name, trace file, or bundled azure-conv / azure-code (default azure-conv)")
    p.add_argument("--prompt-scale", type=positive_float, default=1.0, metavar="X",
                   help="multiply the source's prompt lengths (default 1; 10 for prompts ten "
                        "times longer)")
    p.add_argument("--output-scale", type=positive_float, default=1.0, metavar="X",
                   help="multiply the source's output lengths (default 1)")
    p.add_argument("--mix-shift", help="START:END mix, each neutral, decode-heavy or prefill-heavy")
    p.add_argument("--shift-at", default=None, metavar="DUR",
                   help="--mix-shift at once at this time (e.g. 5m) instead of linearly")
    p.add_argument("--mix-every", default=None, metavar="DUR",
                   help="--mix-shift alternating START and END every DUR")
    p.add_argument("--daily-cycle", action="store_true", help="modulate the rate over a day (+-50%%)")
    p.add_argument("--cycle-period", default="1d", help="period of --daily-cycle (default 1d; shorter to compress)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="random seed (same seed, same workload)")
    p.add_argument("--replace", action="store_true", help="overwrite a workload of the same name")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from gpuprobe.store import Store
    from gpuprobe.units import parse_duration
    from gpuprobe.workloads.loading import load_workload
    from gpuprobe.workloads.summary import summarize
    from gpuprobe.workloads.synth import parse_mix_shift, synthesize

    duration_s = parse_duration(args.duration, "--duration")
    period_s = parse_duration(args.cycle_period, "--cycle-period")
    with Store.open(args.store) as store:
        lengths = _scaled(load_workload(store, args.lengths_from), args.prompt_scale,
                          args.output_scale)
        df = synthesize(args.rate, duration_s, lengths, args.arrival, args.cv, parse_mix_shift(args.mix_shift),
                        args.daily_cycle, period_s, args.seed,
                        parse_duration(args.shift_at, "--shift-at") if args.shift_at else None,
                        parse_duration(args.mix_every, "--mix-every") if args.mix_every else None)
        summary = summarize(df, args.name)
        params = {k: getattr(args, k) for k in ("rate", "arrival", "cv", "lengths_from",
                                                "prompt_scale", "output_scale", "mix_shift",
                                                "daily_cycle", "seed", "shift_at", "mix_every")}
        store.save_workload(args.name, df, source="synth", fmt="synth", replace=args.replace,
                            meta={"summary": summary.to_dict(), "params": {**params, "duration_s": duration_s,
                                                                            "cycle_period_s": period_s}})
    print(json.dumps(summary.to_dict()) if args.json else "\n".join(summary.lines()))
    return 0


def _scaled(lengths, prompt_scale: float, output_scale: float):
    """The length source with its prompts and outputs multiplied (at least a token each)."""
    import numpy as np

    if prompt_scale == 1.0 and output_scale == 1.0:
        return lengths
    return lengths.assign(
        prompt_tokens=np.maximum(1, np.round(lengths["prompt_tokens"] * prompt_scale)).astype("int64"),
        output_tokens=np.maximum(1, np.round(lengths["output_tokens"] * output_scale)).astype("int64"))
