"""The real CLI, run in-process by a test: its exit code and what it printed."""
from gpuprobe.cli.main import main


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `gpuprobe ARGV...` (each argument as str)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own one-line errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err
