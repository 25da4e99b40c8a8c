"""Error types. The CLI turns UserError into one line and exit 2, GpuprobeError into exit 1."""
import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """`text` with newlines and other control characters written as escapes (\\n, \\x00)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class GpuprobeError(Exception):
    """A failure gpuprobe can explain in one line (exit 1).

    The message is kept on one line whatever it quotes: a header cell holding a newline or a
    NUL byte is shown escaped, so a broken file never breaks the one-line promise.
    """

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            args = (one_line(args[0]),)
        super().__init__(*args)


class UserError(GpuprobeError):
    """Bad input from the user: a flag, a file, a line or a field (exit 2).

    The message names what was wrong and where, e.g. ``trace.csv:17: field ContextTokens: ...``.
    """


class StoreError(UserError):
    """The store file given cannot be used (not a gpuprobe database, newer schema, locked)."""
