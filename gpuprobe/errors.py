"""Error types. The CLI turns UserError into one line and exit 2, GpuprobeError into exit 1."""


class GpuprobeError(Exception):
    """A failure gpuprobe can explain in one line (exit 1)."""


class UserError(GpuprobeError):
    """Bad input from the user: a flag, a file, a line or a field (exit 2).

    The message names what was wrong and where, e.g. ``trace.csv:17: field ContextTokens: ...``.
    """


class StoreError(UserError):
    """The store file given cannot be used (not a gpuprobe database, newer schema, locked)."""
