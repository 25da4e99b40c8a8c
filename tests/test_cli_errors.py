"""Bad input to any command: one line on stderr naming what was wrong, exit 2, no traceback."""
import subprocess
import sys

import pytest

from gpuprobe.server.kv_transfer import free_port


def gp(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.fixture()
def broken_csv(tmp_path):
    path = tmp_path / "broken.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
                    "2023-11-16 18:17:04.0319600,abc,8\n")
    return path


CASES = [
    (["import", "{broken}", "--name", "b"], "broken.csv:3: field ContextTokens"),
    (["import", "{tmp}/missing.csv", "--name", "b"], "no such file"),
    (["analyze", "--workload", "nope"], "nope"),
    (["serve", "--layout", "bogus"], "--layout"),
    (["serve", "--prefill-share", "1.5", "--layout", "intra"], "prefill"),
    (["simulate", "--workload", "azure-conv", "--profile", "{tmp}/missing.json"], "missing.json"),
    (["validate", "--workload", "azure-conv", "--load", "-1"], "--load"),
    (["validate", "--workload", "azure-conv", "--plot", "{tmp}/no/such/dir/v.html"], "--plot"),
    (["replay", "--workload", "azure-conv", "--target", "ftp://x"], "--target"),
    (["synth", "--name", "s", "--rate", "-2"], "rate"),
    (["agent", "--duration", "soon"], "duration"),
    (["store", "retention", "--max-age", "soon"], "--max-age"),
    (["worker", "--role", "decode", "--listen", "127.0.0.1:0", "--link-secret-file",
      "{tmp}/missing"], "--link-secret-file {tmp}/missing: cannot read"),
    (["worker", "--role", "decode", "--listen", "nohost", "--link-secret-file", "x"], "--listen"),
    (["serve", "--prefill-workers", "127.0.0.2:9000"], "--decode-workers go together"),
    (["serve", "--prefill-workers", "127.0.0.2:9000", "--decode-workers", "127.0.0.3:0"],
     "a worker's port cannot be 0"),
    (["serve", "--prefill-workers", "127.0.0.2:9000", "--decode-workers", "127.0.0.3:9000"],
     "--link-secret-file is required"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[c[0][0] + "-" + c[1][:12] for c in CASES])
def test_user_error_is_one_line_exit_2(tmp_path, broken_csv, argv, needle):
    argv = [a.format(broken=broken_csv, tmp=tmp_path) for a in argv]
    out = gp(*argv, "--store", str(tmp_path / "s.db"))
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert needle.format(tmp=tmp_path) in lines[0]


def test_broken_import_keeps_what_was_stored(tmp_path, broken_csv):
    db = str(tmp_path / "s.db")
    good = tmp_path / "good.csv"
    good.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n")
    assert gp("import", str(good), "--name", "w", "--store", db).returncode == 0
    assert gp("import", str(broken_csv), "--name", "w", "--replace", "--store", db).returncode == 2
    shown = gp("workloads", "show", "w", "--store", db, "--json")
    assert shown.returncode == 0 and '"requests": 1' in shown.stdout


@pytest.mark.timeout(60)
def test_replay_against_nothing_fails_with_one_line(tmp_path, broken_csv):
    db = str(tmp_path / "s.db")
    assert gp("import", str(broken_csv), "--name", "w", "--skip-bad", "--store", db).returncode == 0
    out = gp("replay", "--workload", "w", "--target", f"http://127.0.0.1:{free_port('127.0.0.1')}",
             "--no-progress", "--store", db)
    assert out.returncode == 1
    assert [ln for ln in out.stderr.splitlines() if ln.strip()][-1].startswith("gpuprobe replay: failed: none of 1")


def test_serve_refuses_a_malformed_kv_ring_size(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPROBE_KV_RING_MB", "2G")
    out = gp("serve", "--layout", "intra", "--port", str(free_port()), "--store", str(tmp_path / "s.db"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "GPUPROBE_KV_RING_MB='2G'" in lines[0]


def test_a_short_link_secret_is_refused(tmp_path):
    (tmp_path / "secret").write_text("abc\n")
    out = gp("worker", "--role", "prefill", "--listen", "127.0.0.1:0", "--link-secret-file",
             str(tmp_path / "secret"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "the secret must be at least 16 characters" in out.stderr
