"""Streaming readers: CSV rows and JSON lines in chunks, with the file line of each row.

Bounded memory: at most `chunk_rows` rows are held at once. Encoding errors and rows the csv
module cannot split are reported with the line they are on.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Iterator

from gpuprobe.workloads.badrows import BadRows

CHUNK_ROWS = 50_000
csv.field_size_limit(1 << 24)  # hash_ids columns can be long; the default 128 KiB is not enough


def _open(path):
    try:
        return open(path, newline="", encoding="utf-8-sig", errors="strict")
    except OSError as exc:
        raise_unreadable(path, exc)


def raise_unreadable(path, exc) -> None:
    from gpuprobe.errors import UserError
    raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None


def csv_header(path) -> list[str] | None:
    """The first non-empty row, stripped; None for an empty file."""
    with _open(path) as fh:
        try:
            for row in csv.reader(fh):
                if any(c.strip() for c in row):
                    return [c.strip() for c in row]
        except (UnicodeDecodeError, csv.Error):
            return None
    return None


def csv_chunks(path, bad: BadRows, chunk_rows: int = CHUNK_ROWS, resume: tuple | None = None
               ) -> Iterator[tuple[list[str], list[int], dict[str, list[str]]]]:
    """Yield (header, line numbers, {column: [text]}) for each chunk of data rows.

    `resume` = (byte offset, lines before it, header) continues a file part-read by the fast
    reader (csvblocks.py) from a line boundary, with the same line numbers.
    """
    if resume is None:
        with _open(path) as fh:
            yield from rows_chunks(csv.reader(fh), bad, chunk_rows)
        return
    offset, line_offset, header = resume
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise_unreadable(path, exc)
    with raw:
        raw.seek(offset)
        with io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="") as fh:
            yield from rows_chunks(csv.reader(fh), bad, chunk_rows, header, line_offset)


def rows_chunks(reader, bad: BadRows, chunk_rows: int, header: list[str] | None = None, line_offset: int = 0
                ) -> Iterator[tuple[list[str], list[int], dict[str, list[str]]]]:
    """The csv-module loop: skip blank lines, take the first row as the header unless given,
    reject rows of the wrong width, and chunk the rest. Lines are `line_offset` + the reader's."""
    lines: list[int] = []
    rows: list[list[str]] = []
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):  # blank line
                continue
            if header is None:
                header = [c.strip() for c in row]
                continue
            if len(row) != len(header):
                bad.reject(line_offset + reader.line_num, "(row)", f"expected {len(header)} fields, found {len(row)}",
                           reason="wrong number of fields")
                continue
            lines.append(line_offset + reader.line_num)
            rows.append(row)
            if len(rows) >= chunk_rows:
                yield header, lines, dict(zip(header, map(list, zip(*rows))))
                lines, rows = [], []
    except UnicodeDecodeError:
        bad.fatal(line_offset + reader.line_num + 1, "not UTF-8 text")
    except csv.Error as exc:
        bad.fatal(line_offset + reader.line_num, f"not a readable CSV row ({exc})")
    if rows:
        yield header, lines, dict(zip(header, map(list, zip(*rows))))


def first_json_object(path) -> dict | None:
    """The first non-empty line parsed as a JSON object, or None."""
    with _open(path) as fh:
        try:
            for line in fh:
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else None
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
    return None


def jsonl_chunks(path, bad: BadRows, chunk_rows: int = CHUNK_ROWS) -> Iterator[tuple[list[int], list[dict]]]:
    """Yield (line numbers, [object]) for each chunk of JSON lines; blank lines are skipped."""
    with _open(path) as fh:
        lines: list[int] = []
        objs: list[dict] = []
        num = 0
        try:
            for num, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    obj = json.loads(text)
                except (ValueError, RecursionError):
                    bad.reject(num, "(line)", "not valid JSON", reason="not valid JSON")
                    continue
                if not isinstance(obj, dict):
                    bad.reject(num, "(line)", "not a JSON object", reason="not a JSON object")
                    continue
                lines.append(num)
                objs.append(obj)
                if len(objs) >= chunk_rows:
                    yield lines, objs
                    lines, objs = [], []
        except UnicodeDecodeError:
            bad.fatal(num + 1, "not UTF-8 text")
        if objs:
            yield lines, objs
