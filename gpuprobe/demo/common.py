"""What every demo stage shares: its settings, its printing, and running a gpuprobe command."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    """How big the demo runs. FULL is `make demo`; QUICK is the CI test's (same stages, fewer
    and shorter requests, the tiny model, so the test stays within a few minutes)."""
    model: str  # the reference server's model
    requests: int  # requests of azure-conv replayed against it and weighed by recommend
    rate_rps: float  # the slice's mean rate after scaling: what 2 CPU cores serve
    token_scale: float  # prompts and outputs scaled down (azure-conv's median prompt ~1k tokens)
    max_prompt: int  # profile --max-prompt: the longest scaled prompt, so the fit is not extrapolated
    max_batch: int  # profile --max-batch: its largest decode burst (64 streams is minutes on a CPU)
    validate_layouts: str  # validate replays the same slice recommend weighs (requests, rate, lengths)
    validate_budget: str  # validate --budget: the demo keeps its 10 minutes
    slo_ttft_s: float
    slo_tbt_s: float
    plan_s: tuple  # (stage, seconds expected on an idle 2-core machine), printed at the start


# TTFT and TBT targets are what a 135M model on 2 CPU cores can meet at ~1 request/s (measured
# here: TTFT p99 below a second, TBT near 50-150 ms); a GPU deployment would use --slo chat.
# FULL's profile: prefills up to 256 tokens (the 40 requests' longest scaled prompt is 204) and
# decode bursts up to 32 streams (recommend's goodput search reaches decode batches of ~32 on
# smollm2; 64-stream bursts were what kept the demo past 10 minutes). plan_s: seconds per stage
# on an idle 2-core machine (docs/benchmarks.md); replay's is its 40 arrivals at 1 req/s,
# validate's its own plan for three tiny-model layouts with waits for a quiet machine.
FULL = Settings(model="smollm2-135m", requests=40, rate_rps=1.0, token_scale=0.05, max_prompt=256,
                max_batch=32, validate_layouts="monolithic,intra,cross",
                validate_budget="6m", slo_ttft_s=3.0, slo_tbt_s=0.5,
                plan_s=(("import", 5), ("serve", 20), ("replay", 45), ("profile", 70), ("forecast", 5),
                        ("validate", 240), ("recommend", 10), ("apply", 15), ("report", 20)))
QUICK = Settings(model="tiny", requests=16, rate_rps=2.0, token_scale=0.03, max_prompt=64,
                 max_batch=16, validate_layouts="monolithic",
                 validate_budget="6m", slo_ttft_s=3.0, slo_tbt_s=0.5,
                 plan_s=(("import", 5), ("serve", 10), ("replay", 10), ("profile", 20), ("forecast", 5),
                         ("validate", 90), ("recommend", 10), ("apply", 10), ("report", 20)))
VALIDATE_MODEL = "tiny"  # validate starts and calibrates one server per layout: smollm2 thrice is minutes


@dataclass
class Run:
    """What the stages hand on to each other (paths, URLs, ids); printed at the end."""
    store: Path
    out: Path
    settings: Settings
    model: str = ""
    url: str = ""
    token_file: Path | None = None
    profile: Path | None = None
    recommendation: int | None = None
    failed: list = None
    skipped: list = None
    made: dict = None  # label -> path or URL, for "where everything is"

    def __post_init__(self):
        self.failed, self.skipped, self.made = [], [], {}


def say(text: str = "") -> None:
    print(text, flush=True)


def stage(title: str) -> float:
    say(f"\n== {title}")
    return time.perf_counter()


def done(t0: float) -> None:
    say(f"  ({time.perf_counter() - t0:.1f} s)")


def skipped(run: Run, piece: str, why: str) -> None:
    say(f"  skipped: {piece} {why}")
    run.skipped.append(f"{piece} {why}")


def gpuprobe(run: Run, name: str, *argv) -> int:
    """Run `gpuprobe NAME ARGV --store STORE` as a user would, a process of its own with its
    output passed through. A non-zero exit is recorded and the demo goes on."""
    args = [name, "--store", str(run.store), *(str(a) for a in argv)]
    say("  $ gpuprobe " + " ".join(args))
    rc = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", *args], check=False).returncode
    if rc:
        say(f"  failed: gpuprobe {name} exited {rc}")
        run.failed.append(name)
    return rc
