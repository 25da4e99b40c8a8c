"""What to do with a row that cannot be imported: stop with a line naming it, or count it."""
from __future__ import annotations

from collections import Counter

from gpuprobe.errors import UserError


class BadRows:
    """Rejects rows for one file. Without `skip_bad` the first rejection raises a UserError
    "FILE:LINE: field NAME: problem", followed by a hint to use --skip-bad unless `skip_bad_hint` is
    False (for callers without that flag); with it, rows are counted by reason and the import goes on."""

    def __init__(self, path, skip_bad: bool = False, skip_bad_hint: bool = True):
        self.path, self.skip_bad = str(path), skip_bad
        self._hint = " (use --skip-bad to import the rest)" if skip_bad_hint else ""
        self.skipped: Counter = Counter()   # reason -> rows skipped as bad
        self.dropped: Counter = Counter()   # reason -> rows dropped by the format's rules (failures)
        self.first_line: dict[str, int] = {}

    def reject(self, line: int, field: str, problem: str, reason: str | None = None) -> None:
        line = int(line)  # may be a numpy integer (csvblocks.py); the report is JSON
        if not self.skip_bad:
            raise UserError(f"{self.path}:{line}: field {field}: {problem}{self._hint}")
        key = reason or f"field {field}: {problem}"
        self.skipped[key] += 1
        self.first_line.setdefault(key, line)

    def fatal(self, line: int | None, problem: str) -> None:
        """A problem that no skipping can get past (bad encoding, unreadable file)."""
        where = f"{self.path}:{line}" if line else self.path
        raise UserError(f"{where}: {problem}")

    def drop(self, reason: str, count: int = 1) -> None:
        if count:
            self.dropped[reason] += count

    def report(self) -> dict:
        return {"skipped": dict(self.skipped), "dropped": dict(self.dropped),
                "skipped_first_line": dict(self.first_line)}
