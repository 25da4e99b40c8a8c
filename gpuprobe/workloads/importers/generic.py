"""Any CSV or JSONL trace, given a column mapping:
`--map timestamp=ts,prompt_tokens=in,output_tokens=out[,model=m,session_id=s] --time-unit ms`.

Without `--map` the columns are looked up by those names themselves (`timestamp,
prompt_tokens,output_tokens`), so a file written with gpuprobe's names needs no map.
`--time-unit` is s, ms, us, ns, or iso (ISO 8601 date-times). JSONL is recognised by a first
non-blank character `{`.
"""
from __future__ import annotations

from typing import Iterator

from gpuprobe.errors import UserError
from gpuprobe.workloads import convert
from gpuprobe.workloads.chunk import find_columns, make_chunk
from gpuprobe.workloads.csvblocks import csv_columns
from gpuprobe.workloads.readers import jsonl_chunks

REQUIRED = ("timestamp", "prompt_tokens", "output_tokens")
OPTIONAL = ("model", "log_type", "session_id")


def parse_map(text: str | None) -> dict[str, str]:
    """'timestamp=ts,prompt_tokens=in,output_tokens=out' -> {'timestamp': 'ts', ...}. Without a
    map, every key names a column of its own name (a file written with gpuprobe's names)."""
    if not (text or "").strip():
        return {k: k for k in REQUIRED + OPTIONAL}
    mapping = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, col = part.partition("=")
        if not sep or key.strip() not in REQUIRED + OPTIONAL or not col.strip():
            raise UserError(f"--map: {part!r} is not KEY=COLUMN with KEY one of {', '.join(REQUIRED + OPTIONAL)}")
        mapping[key.strip()] = col.strip()
    missing = [k for k in REQUIRED if k not in mapping]
    if missing:
        raise UserError(f"--map: missing {', '.join(missing)} (e.g. --map timestamp=ts,prompt_tokens=in,output_tokens=out)")
    return mapping


def is_jsonl(path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4096).lstrip()[:1] == b"{"


def _convert(cols, lines, names, opts, bad) -> dict:
    """`cols` and `names` (the file's spelling, for messages) are keyed by our keys."""
    unit = opts.time_unit or "s"
    if unit == "iso":
        t, ok_t = convert.epoch_seconds(cols["timestamp"], lines, names["timestamp"], bad)
    elif unit in convert.TIME_UNITS:
        t, ok_t = convert.seconds(cols["timestamp"], lines, names["timestamp"], bad, unit)
    else:
        raise UserError(f"--time-unit: {unit!r} is not one of s, ms, us, ns, iso")
    p, ok_p = convert.tokens(cols["prompt_tokens"], lines, names["prompt_tokens"], bad)
    o, ok_o = convert.tokens(cols["output_tokens"], lines, names["output_tokens"], bad)
    extra = {k: convert.texts(cols[k]) for k in OPTIONAL if k in cols}
    return make_chunk(lines, t, p, o, ok_t & ok_p & ok_o, **extra)


def chunks(path, opts, bad) -> Iterator[dict]:
    mapping = parse_map(opts.mapping)
    if is_jsonl(path):
        for lines, objs in jsonl_chunks(path, bad, opts.chunk_rows):
            cols = {key: [o.get(col) for o in objs] for key, col in mapping.items()}
            yield _convert(cols, lines, mapping, opts, bad)
        return
    iso = (opts.time_unit or "s") == "iso"

    def pick(header):
        found = find_columns(header, {k: v for k, v in mapping.items() if k in REQUIRED}, path,
                             {k: v for k, v in mapping.items() if k in OPTIONAL})
        return {k: (name, "text" if k in OPTIONAL or (k == "timestamp" and iso) else "number")
                for k, name in found.items()}
    for names, lines, cols in csv_columns(path, bad, opts.chunk_rows, pick):
        yield _convert(cols, lines, names, opts, bad)
