"""Fast CSV reading: blocks of lines parsed by pandas' C reader, with the csv module kept for
the rows that need it, so a bad row is still named "FILE:LINE: field NAME: problem".

    for names, lines, cols in csv_columns(path, bad, 50_000, pick): ...

A block (`chunk_rows` lines) goes to pandas.read_csv only when its line structure is certain
without the csv module: valid UTF-8, no quote, no NUL, no bare CR, no byte-order mark, every line
exactly as wide as the header. Then the file line of row i is the block's first line + i, and
number columns come back as floats with the file's text kept for messages. A block that pandas
cannot read as numbers is read again as text, and the csv path's checks judge it. A block with a
blank or wrong-width line or bad bytes goes through the csv module (same lines, same messages).
After a quote or a bare CR the rest of the file goes to the csv module: a quoted field may span
lines, so where a row starts is no longer known without it.

Blank and wrong-width lines count towards a block's `chunk_rows`, so chunk boundaries can differ
from the csv-module path's after such lines; clean files chunk exactly as before.
"""
from __future__ import annotations

import csv
import io
from itertools import islice
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from gpuprobe.workloads.badrows import BadRows
from gpuprobe.workloads.readers import csv_chunks, raise_unreadable, rows_chunks

FIELD_LIMIT = 1 << 24   # the csv module's field limit (readers.py): longer lines go to it
_BOM = b"\xef\xbb\xbf"

Pick = Callable[[list[str]], dict]  # header -> {key: (header name, "number" | "text")}


class NumberColumn:
    """A number column of one clean block: `values` (float64, as pandas parsed them) and, for
    messages, the text of row i as the file has it (`col[i]`, decoded on demand)."""

    def __init__(self, values: np.ndarray, raw: list[bytes], field: int):
        self.values, self._raw, self._field = values, raw, field

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> str:
        return self._raw[i].decode("utf-8").rstrip("\r\n").split(",")[self._field]

    def take(self, index) -> "NumberColumn":
        index = np.asarray(index)
        return NumberColumn(self.values[index], [self._raw[i] for i in index.tolist()], self._field)


class _NeedsCsvModule(Exception):
    """The header cannot be split into lines safely (bare CR, bad bytes): use the csv path."""


def _header(fh) -> tuple[list[str] | None, int, int] | None:
    """(header, lines it took, bytes it took), header None for a file of blank lines; None
    when the csv module must read the whole file."""
    taken: list[bytes] = []

    def lines():
        for raw in fh:
            if raw.count(b"\r") != raw.count(b"\r\n"):
                raise _NeedsCsvModule
            taken.append(raw)
            yield raw.decode("utf-8-sig" if len(taken) == 1 else "utf-8")
    try:
        for row in csv.reader(lines()):
            if row and not (len(row) == 1 and not row[0].strip()):
                return [c.strip() for c in row], len(taken), sum(map(len, taken))
    except (_NeedsCsvModule, UnicodeDecodeError, csv.Error):
        return None
    return None, len(taken), sum(map(len, taken))


def _shape(buf: bytes, num_lines: int, num_fields: int) -> str:
    """'clean' (pandas), 'rows' (csv module for this block) or 'rest' (csv module from here)."""
    if b'"' in buf or (b"\r" in buf and buf.count(b"\r") != buf.count(b"\r\n")):
        return "rest"
    if b"\0" in buf or buf.startswith(_BOM):
        return "rows"
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        return "rows"
    a = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(a == 10)
    if len(ends) < num_lines:  # last line of the file without a newline
        ends = np.append(ends, len(a))
    per_line = np.diff(np.searchsorted(np.flatnonzero(a == 44), ends), prepend=0)
    if (per_line != num_fields - 1).any() or np.diff(ends, prepend=-1).max() > FIELD_LIMIT:
        return "rows"
    return "clean"


def _read(buf: bytes, fields: list[int], float_fields: set[int]) -> pd.DataFrame | None:
    dtype = {j: (np.float64 if j in float_fields else object) for j in fields}
    try:
        return pd.read_csv(io.BytesIO(buf), header=None, usecols=fields, dtype=dtype, na_filter=False,
                           engine="c", encoding="utf-8", quoting=csv.QUOTE_NONE)
    except (ValueError, OverflowError):  # a value that is not a float: the csv path's checks name it
        return None


def _parse(buf: bytes, raw: list[bytes], spec: dict) -> dict | None:
    """{key: column} for a clean block, or None if pandas disagrees about its shape."""
    fields = sorted({j for j, _ in spec.values()})
    numeric = {j for j, kind in spec.values() if kind == "number"}
    floats = numeric - {j for j, kind in spec.values() if kind != "number"}
    lower = buf.lower()
    if b"true" in lower or b"false" in lower:  # pandas reads them as 1/0 in a float column; the csv path says "not a number"
        floats = set()
    df = _read(buf, fields, floats) if floats else None
    if df is None:
        floats = set()
        df = _read(buf, fields, floats)
    if df is None or len(df) != len(raw):
        return None
    cols = {}
    for key, (j, kind) in spec.items():
        col = df[j].to_numpy()
        if j in floats:
            cols[key] = NumberColumn(col, raw, j)
        else:  # text of a number column goes to the csv path's converters as a list, as before
            cols[key] = col.tolist() if kind == "number" else col.astype(object, copy=False)
    return cols


class _BadBytes(Exception):
    def __init__(self, line: int):
        self.line = line


def _decoded(raw: list[bytes], first_line: int) -> Iterator[str]:
    for i, line in enumerate(raw):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError:
            raise _BadBytes(first_line + i) from None


def _by_key(chunks, pick: Pick) -> Iterator[tuple[dict, list, dict]]:
    """csv-module chunks (header, lines, {column: [text]}) -> (names, lines, {key: [text]})."""
    spec = None
    for header, lines, cols in chunks:
        spec = spec or pick(header)
        yield {k: name for k, (name, _) in spec.items()}, lines, {k: cols[name] for k, (name, _) in spec.items()}


def _indices(header: list[str], spec: dict) -> dict:
    """key -> (field index, kind); a name given twice means its last column, as the csv path's dict."""
    last = {name: j for j, name in enumerate(header)}
    return {k: (last[name], kind) for k, (name, kind) in spec.items()}


def csv_columns(path, bad: BadRows, chunk_rows: int, pick: Pick) -> Iterator[tuple[dict, object, dict]]:
    """Yield (names {key: header name}, file lines, {key: column}) per chunk of data rows.

    A column is a NumberColumn or a list of str for "number" keys, an array or list of str
    for "text" keys. `pick(header)` maps keys to header names (raising UserError for a missing
    one); it is called when the first rows are ready, as the csv path always did.
    """
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise_unreadable(path, exc)
    with fh:
        start = _header(fh)
        if start is None or (start[0] is not None and len(start[0]) < 2):  # one column: blank lines are rows
            yield from _by_key(csv_chunks(path, bad, chunk_rows), pick)
            return
        header, line_no, offset = start
        if header is None:
            return
        names = spec = None
        for raw in iter(lambda: list(islice(fh, chunk_rows)), []):
            buf = b"".join(raw)
            shape = _shape(buf, len(raw), len(header))
            if shape == "rest":
                yield from _by_key(csv_chunks(path, bad, chunk_rows, resume=(offset, line_no, header)), pick)
                return
            cols = None
            if shape == "clean":
                if spec is None:
                    picked = pick(header)
                    names, spec = {k: n for k, (n, _) in picked.items()}, _indices(header, picked)
                cols = _parse(buf, raw, spec)
            if cols is not None:
                yield names, np.arange(line_no + 1, line_no + 1 + len(raw), dtype=np.int64), cols
            else:
                try:
                    reader = csv.reader(_decoded(raw, line_no + 1))
                    yield from _by_key(rows_chunks(reader, bad, len(raw) + 1, header, line_no), pick)
                except _BadBytes as exc:
                    bad.fatal(exc.line, "not UTF-8 text")
            line_no += len(raw)
            offset += len(buf)
