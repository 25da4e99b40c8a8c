"""The agent's settings: a TOML file (--config) overridden by command-line flags.

    [agent]
    store = "/var/lib/gpuprobe/gpuprobe.db"
    metrics_port = 9400            # 0: pick a free port and print it
    listen = "127.0.0.1"           # address of /metrics; "0.0.0.0" for a Prometheus elsewhere
    flush_interval = 1             # seconds between store writes
    max_buffer_samples = 100000    # held in memory while the store is locked or full
    scrape = ["http://127.0.0.1:8000/metrics"]
    process_pattern = "vllm|sglang|text-generation|gpuprobe serve"
    pids = []
    duration = 0                   # seconds; 0 runs until SIGTERM (the --duration flag wants > 0)

    [intervals]                    # seconds; 0 turns a source off
    nvml = 1
    gpm = 1
    proc = 5
    host = 1
    scrape = 5
"""
from __future__ import annotations

import argparse
import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from gpuprobe import argtypes
from gpuprobe.errors import UserError


@dataclass(frozen=True)
class Intervals:
    nvml: float = 1.0
    gpm: float = 1.0
    proc: float = 5.0
    host: float = 1.0
    scrape: float = 5.0


@dataclass(frozen=True)
class AgentConfig:
    store: str | None = None
    metrics_port: int | None = 9400  # None: no /metrics endpoint
    listen: str = "127.0.0.1"  # this host only, like serve and dashboard; widen on purpose
    flush_interval: float = 1.0
    max_buffer_samples: int = 100_000
    scrape: tuple[str, ...] = ()
    process_pattern: str | None = None
    pids: tuple[int, ...] = ()
    duration: float = 0.0
    intervals: Intervals = field(default_factory=Intervals)


def load(path: str | Path | None, overrides: dict) -> AgentConfig:
    """Settings from `path` (TOML) then `overrides` (flag values; None means not given)."""
    agent, intervals = {}, {}
    if path:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{path}: not valid TOML ({exc})") from None
        agent, intervals = dict(doc.get("agent", {})), dict(doc.get("intervals", {}))
        _check(path, "agent", agent, {f.name for f in dataclasses.fields(AgentConfig)} - {"intervals"})
        _check(path, "intervals", intervals, {f.name for f in dataclasses.fields(Intervals)})
        unknown = set(doc) - {"agent", "intervals"}
        if unknown:
            raise UserError(f"{path}: unknown section [{sorted(unknown)[0]}] (known: [agent], [intervals])")
    for key, value in overrides.items():
        if value is None:
            continue
        if key.startswith("interval_"):
            intervals[key[len("interval_"):]] = value
        else:
            agent[key] = value
    try:
        iv = Intervals(**{k: float(v) for k, v in intervals.items()})
        agent["scrape"] = tuple(agent.get("scrape", ()))
        agent["pids"] = tuple(int(p) for p in agent.get("pids", ()))
        cfg = AgentConfig(**agent, intervals=iv)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path or 'flags'}: bad agent setting ({exc})") from None
    _validate(path or "flags", cfg)
    return cfg


def _validate(where, cfg: AgentConfig) -> None:
    """The file's values get the checks the flags get from argparse."""
    checks = [("flush_interval", argtypes.positive_float, [cfg.flush_interval]),
              ("max_buffer_samples", argtypes.positive_int, [cfg.max_buffer_samples]),
              ("duration", argtypes.nonneg_float, [cfg.duration]),
              ("metrics_port", argtypes.port, [] if cfg.metrics_port is None else [cfg.metrics_port]),
              ("process_pattern", argtypes.regex, [cfg.process_pattern] if cfg.process_pattern else []),
              ("scrape", argtypes.http_url, cfg.scrape), ("pids", argtypes.positive_int, cfg.pids)]
    checks += [(f"intervals.{k}", argtypes.nonneg_float, [v]) for k, v in dataclasses.asdict(cfg.intervals).items()]
    for key, check, values in checks:
        for value in values:
            try:
                check(str(value))
            except argparse.ArgumentTypeError as exc:
                raise UserError(f"{where}: {key}: {exc}") from None


def _check(path, section: str, table: dict, known: set[str]) -> None:
    unknown = set(table) - known
    if unknown:
        raise UserError(f"{path}: [{section}] unknown key {sorted(unknown)[0]!r} "
                        f"(known: {', '.join(sorted(known))})")
