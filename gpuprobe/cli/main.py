"""Entry point: parse, dispatch, and turn errors into one line and an exit code.

Exit codes: 0 ok, 1 a failure gpuprobe could not get past, 2 a user error (a flag, a file, a
line or a field), 130 interrupted, 141 the output's reader went away. Tracebacks only with
--debug.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from gpuprobe import __version__
from gpuprobe.errors import GpuprobeError, UserError

PROG = "gpuprobe"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr and exit 2, and flags are never
    abbreviated: `validate --profile p.json` must not be read as --profile-out and overwrite
    the user's profile (simulate and recommend take --profile as an input)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse API
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def _command_modules() -> list:
    import gpuprobe.cli.commands as pkg
    mods = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        try:
            mods.append(importlib.import_module(f"{pkg.__name__}.{info.name}"))
        except Exception as exc:  # one broken command must not take the others down
            sys.stderr.write(f"{PROG}: warning: command module {info.name!r} failed to load: {exc}\n")
    return sorted(mods, key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="PATH", default=argparse.SUPPRESS,
                        help="SQLite store file (default: $GPUPROBE_STORE, else ./gpuprobe.db; "
                        "demo: .demo/gpuprobe.db)")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")
    parser = OneLineParser(prog=PROG, description="Measure, model and decide how to lay out LLM "
                           "prefill and decode.", parents=[common])
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for mod in _command_modules():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP, parents=[common])
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.store = getattr(args, "store", None)
    args.debug = getattr(args, "debug", False)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except UserError as exc:
        if args.debug:
            raise
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except GpuprobeError as exc:
        if args.debug:
            raise
        print(f"{PROG} {args.command}: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as a SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if args.debug:
            raise
        print(f"{PROG} {args.command}: internal error: {type(exc).__name__}: {exc} "
              f"(rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
