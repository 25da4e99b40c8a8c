"""What a bench that times a worker's CPU does first: read --reps, then run one torch thread on
one core, as a pinned worker does (`python bench/x.py` puts bench/ on the path, so benches
import this as `pin`)."""
import argparse
import os


def args_like_a_worker(default_reps: int = 40) -> argparse.Namespace:
    """The bench's arguments (--reps), with this process pinned like a worker."""
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=default_reps)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return args
