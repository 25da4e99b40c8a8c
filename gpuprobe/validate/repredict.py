"""Re-predict dumped validate runs with the model as it is now.

A validate run's measurements do not depend on the model: the calibration steps, the replays'
client records and the speed probe's readings are what they were. So a change to the cost
model, the simulator or the way passes are pooled can be scored on every run dumped so far
(GPUPROBE_VALIDATE_DUMP=path gpuprobe validate ...) without running the servers again:

    python -m gpuprobe.validate.repredict run1.pkl run2.pkl          # one line per run, then the tally
    python -m gpuprobe.validate.repredict --passes 1 --replays 3 runs/*.pkl   # as a one-pass run would
    python -m gpuprobe.validate.repredict --no-speed-probe runs/*.pkl
    python -m gpuprobe.validate.repredict --sim-seeds 1 runs/*.pkl   # one noise seed per replay

--passes N fits each layout on its first N calibration passes only, --replays K compares the
first K replays only; so a run dumped with more of both (validate --replays 5) can stand for
the shorter protocols too.
"""
from __future__ import annotations

import argparse
import pickle
import sys
import types
from dataclasses import replace

import numpy as np

from gpuprobe.errors import UserError
from gpuprobe.perf.metrics import pick_best
from gpuprobe.validate.predictions import predict_layouts
from gpuprobe.validate.options import ValidateOptions
from gpuprobe.validate.verdict import (
    BAR,
    compare,
    measured_summaries,
    median_p50_error,
    tbt_tolerance,
)
from gpuprobe.sim.predict import median_summary


def load_dump(path: str) -> dict:
    """The pickled dict drift.dump_state wrote; UserError naming the file otherwise."""
    try:
        with open(path, "rb") as fh:
            dump = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise UserError(f"{path}: not a readable validate dump ({exc})") from None
    if not isinstance(dump, dict) or not {"schedule", "probes"} <= set(dump):
        raise UserError(f"{path}: not a validate dump (no schedule and probes)")
    return dump


def probes_from_dump(dump: dict, opts: ValidateOptions, passes: int | None = None,
                     replays: int | None = None) -> dict:
    """{layout: LayoutProbe} refitted from the dump: the first `passes` calibration passes
    (all when None) pooled, the first `replays` replays (all when None)."""
    from gpuprobe.validate.layout_probe import LayoutProbe

    out = {}
    for layout, state in dump["probes"].items():
        probe = LayoutProbe(opts, layout, "", 0)
        probe.cal_runs = list(state["cal_runs"][:passes])
        if not probe.cal_runs:
            raise UserError(f"{layout}: the dump holds no calibration pass")
        probe._fit()
        probe.kv_bytes_per_token = state["kv_bytes_per_token"] or probe.kv_bytes_per_token
        probe.replays = list(state["replays"][:replays])
        probe.replay_windows = list(state["replay_windows"][:replays])
        probe.foreign_cores = state["foreign_cores"]
        out[layout] = probe
    return out


def dump_drift(dump: dict, probes: dict, opts) -> dict | None:
    """drift.drift_factors from the speed probe's readings the dump kept (None
    without them or without a correction)."""
    from gpuprobe.validate.drift import drift_factors

    if dump.get("speed_rows") is None:
        return None
    speed = types.SimpleNamespace(samples=lambda: dump["speed_rows"],
                                  cores=tuple(int(c) for c in dump["speed_cores"]))
    return drift_factors(speed, probes, opts) or None


def repredict(dump: dict, passes: int | None = None, replays: int | None = None,
              speed_probe: bool = True, sim_seeds: int | None = None) -> dict:
    """The validate verdict on a dumped run's measurements with today's model: rows (as
    validate's), per-layout median p50 error, best measured and predicted, and whether the
    run meets issue 6's bar (every layout at most BAR, the same best layout)."""
    layouts = tuple(dump["probes"])
    # older dumps: default options; the simulator's seeds are the model's, not the run's
    opts = replace(dump.get("options") or ValidateOptions(), layouts=layouts,
                   sim_seeds=sim_seeds or ValidateOptions.sim_seeds)
    probes = probes_from_dump(dump, opts, passes, replays)
    opts = replace(opts, replays=min(len(p.replays) for p in probes.values()))
    drift = dump_drift(dump, probes, opts) if speed_probe else None
    _, predicted, _, _ = predict_layouts(dump["schedule"], probes, opts, drift)
    per_replay = measured_summaries(probes, layouts, opts.slo)
    measured = {k: median_summary(v) for k, v in per_replay.items()}
    rows = compare(predicted, measured)
    tol = tbt_tolerance(per_replay)
    errors = {k: median_p50_error(rows, k) for k in layouts}
    best = (pick_best(measured, tol), pick_best(predicted, tol))
    return {"rows": rows, "errors": errors, "best_measured": best[0], "best_predicted": best[1],
            "tbt_tolerance": tol, "passes": min(len(p.cal_runs) for p in probes.values()),
            "replays": opts.replays,
            "meets_bar": best[0] == best[1] and all(e is not None and e <= BAR
                                                    for e in errors.values())}


def _line(name: str, res: dict) -> str:
    err = {(r["layout"], r["metric"]): r["rel_error"] for r in res["rows"]}
    parts = [f"{k} {v:.1%} (TTFT {err[(k, 'ttft_p50_s')]:+.0%}, TBT {err[(k, 'tbt_p50_s')]:+.0%})"
             for k, v in res["errors"].items()]
    return (f"{name}: " + " | ".join(parts) + f" | best {res['best_measured']} / "
            f"{res['best_predicted']} | {'meets the bar' if res['meets_bar'] else 'misses'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuprobe.validate.repredict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dumps", nargs="+", metavar="DUMP", help="files GPUPROBE_VALIDATE_DUMP wrote")
    p.add_argument("--passes", type=int, default=None, help="fit on the first N passes only")
    p.add_argument("--replays", type=int, default=None, help="compare the first K replays only")
    p.add_argument("--no-speed-probe", action="store_true", help="predict without the speed correction")
    p.add_argument("--sim-seeds", type=int, default=None,
                   help=f"simulator noise seeds per replay (default {ValidateOptions.sim_seeds})")
    args = p.parse_args(argv)
    for name in ("passes", "replays", "sim_seeds"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            print(f"repredict: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    met = best = 0
    errors = []
    try:
        for path in args.dumps:
            res = repredict(load_dump(path), args.passes, args.replays, not args.no_speed_probe,
                            args.sim_seeds)
            print(_line(path, res), flush=True)
            met += res["meets_bar"]
            best += res["best_measured"] == res["best_predicted"]
            errors += [e for e in res["errors"].values() if e is not None]
    except UserError as exc:
        print(f"repredict: {exc}", file=sys.stderr)
        return 2
    n = len(args.dumps)
    within = sum(e <= BAR for e in errors)
    print(f"{n} runs: the bar met in {met}, the best layout in {best}; {within} of {len(errors)} "
          f"layouts within {BAR:.0%} (median error {np.median(errors):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
