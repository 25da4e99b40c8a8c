"""Import one trace file into the store: read in chunks, check, order, write, summarise.

    result = import_trace(store, "trace.csv", "azure-code")   # -> ImportResult

Memory is bounded by the chunk size plus the reorder window (ordering.py), never by the file:
rows go to the store through `workload_writer`, which publishes the workload only when the
whole file has been read (a failure stores nothing).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuprobe.errors import UserError
from gpuprobe.workloads import formats
from gpuprobe.workloads.badrows import BadRows
from gpuprobe.workloads.importers.generic import parse_map
from gpuprobe.workloads.ordering import WINDOW_ROWS, ReorderWindow
from gpuprobe.workloads.readers import CHUNK_ROWS
from gpuprobe.workloads.summary import SummaryBuilder, WorkloadSummary


@dataclass(frozen=True)
class ImportOptions:
    mapping: str | None = None      # generic format: "timestamp=ts,prompt_tokens=in,output_tokens=out"
    time_unit: str | None = None    # generic format: s, ms, us, ns, iso
    run_id: str | None = None       # recorded format: one run of a store
    skip_bad_hint: bool = True      # a bad row's error names --skip-bad (only `gpuprobe import` has it)
    chunk_rows: int = CHUNK_ROWS
    window_rows: int = WINDOW_ROWS


@dataclass(frozen=True)
class ImportResult:
    summary: WorkloadSummary
    format: str
    skipped: dict = field(default_factory=dict)    # reason -> rows skipped as bad (--skip-bad)
    dropped: dict = field(default_factory=dict)    # reason -> rows dropped as failed requests
    num_reordered: int = 0                         # rows sorted into place (out of order in the file)


def _check_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if not path.is_file():
        raise UserError(f"{path}: not a file")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: file is empty (no header and no requests)")


def import_trace(store, path, name: str, fmt: str = "auto", replace: bool = False, skip_bad: bool = False,
                 opts: ImportOptions | None = None) -> ImportResult:
    """Import `path` as workload `name`. Raises UserError for bad input (nothing is stored)."""
    path, opts = Path(path), opts or ImportOptions()
    _check_file(path)
    fmt = formats.detect(path, has_map=bool(opts.mapping)) if fmt == "auto" else formats.canonical(fmt)
    module = formats.importer(fmt)
    bad = BadRows(path, skip_bad, opts.skip_bad_hint)
    # Out-of-order rows name the time column as the file does (the --map column for csv).
    time_field = parse_map(opts.mapping)["timestamp"] if fmt == "csv" else module.TIME_FIELD
    window = ReorderWindow(bad, time_field, opts.window_rows)
    builder, t0 = SummaryBuilder(), None
    with store.workload_writer(name, source=str(path), fmt=fmt, replace=replace) as writer:
        def write(ready: dict) -> None:
            nonlocal t0
            t0 = float(ready["arrival_s"][0]) if t0 is None else t0
            builder.add(ready["arrival_s"] - t0, ready["prompt_tokens"], ready["output_tokens"])
            writer.add_columns(ready["arrival_s"] - t0, ready["prompt_tokens"], ready["output_tokens"],
                               ready["model"], ready["log_type"], ready["session_id"], ready["hash_ids"])
        for chunk in module.chunks(path, opts, bad):
            for ready in window.push(chunk):
                write(ready)
        for ready in window.flush():
            write(ready)
        if writer.num_requests == 0:
            why = "; ".join(f"{n} {r}" for r, n in {**bad.skipped, **bad.dropped}.items())
            raise UserError(f"{path}: no requests to import" + (f" ({why})" if why else " (only a header)"))
        summary = builder.result(name)
        writer.commit(meta={"summary": summary.to_dict(), "epoch_start_s": t0, "path": str(path),
                            "reordered": window.num_reordered, **bad.report()})
    return ImportResult(summary, fmt, dict(bad.skipped), dict(bad.dropped), window.num_reordered)
