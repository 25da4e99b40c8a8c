"""The gpuprobe command: help, version, one-line errors, exit codes, a light import."""
import subprocess
import sys


from gpuprobe.cli.main import main
from gpuprobe.store import Store

EXE = [sys.executable, "-m", "gpuprobe.cli.main"]


def run(*args):
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=120)


def test_help_lists_subcommands():
    out = run("--help")
    assert out.returncode == 0
    for name in ("store", "demo"):
        assert name in out.stdout


def test_version():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("gpuprobe ")


def test_bad_flag_is_one_line_exit_2():
    out = run("store", "info", "--no-such-flag")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "--no-such-flag" in out.stderr


def test_bad_store_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_text("not sqlite")
    out = run("store", "info", "--store", str(bad))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and str(bad) in out.stderr and "Traceback" not in out.stderr
    assert bad.read_text() == "not sqlite"


def test_import_gpuprobe_is_light():
    code = ("import sys, gpuprobe, gpuprobe.store, gpuprobe.cli.main; gpuprobe.cli.main.build_parser();"
            "heavy = [m for m in ('torch', 'streamlit', 'pynvml', 'statsmodels',"
            " 'aiconfigurator_core') if m in sys.modules];"
            "print(heavy); sys.exit(1 if heavy else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_store_info_and_retention(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    assert main(["store", "info", "--store", db]) == 2  # a reader does not create a store
    Store.open(db).close()
    assert main(["store", "info", "--store", db, "--json"]) == 0
    assert '"schema_version"' in capsys.readouterr().out
    assert main(["store", "retention", "--max-age", "7d", "--store", db]) == 0
    assert main(["store", "retention", "--max-age", "soon", "--store", db]) == 2
    assert "--max-age" in capsys.readouterr().err
