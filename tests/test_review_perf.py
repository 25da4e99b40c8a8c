"""The review's findings on profile, simulate, validate, serve and the server's API: bad input is
one clean line and exit 2 (or an HTTP 4xx), before any long work starts. The server tests share
one real `gpuprobe serve --model tiny` (conftest's reference_server)."""
from __future__ import annotations

import json
import os
import time

import pandas as pd
import pytest
import requests

from cli_run import run_cli as cli
from gpuprobe.cli.main import main
from gpuprobe.errors import GpuprobeError

pytestmark = pytest.mark.timeout(120)


def assert_user_error(capsys, needle: str, *argv) -> None:
    rc, _, err = cli(capsys, *argv)
    assert rc == 2 and needle in err, (rc, err)
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err, err


@pytest.fixture(scope="module")
def spec_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "h200.json"
    assert main(["profile", "--spec", "h200", "--out", str(path)]) == 0
    return str(path)


# ---- profile against the reference server (problems 1, 2) ----------------------------------

def test_models_entry_carries_vocab_and_context(reference_server):
    entry = requests.get(reference_server + "/v1/models", timeout=10).json()["data"][0]
    assert (entry["id"], entry["object"]) == ("tiny", "model")
    assert (entry["vocab_size"], entry["max_model_len"]) == (512, 2048)


@pytest.mark.slow
@pytest.mark.timeout(300)  # a whole profile: prefills up to 2,047 tokens, the mixed sweep
def test_profile_reads_the_vocab_and_caps_the_sweep_at_the_context(reference_server, tmp_path,
                                                                    capsys):
    out = tmp_path / "p.json"
    # --max-batch 4: the decode bursts are not this test's subject (64 streams took a minute)
    rc, stdout, err = cli(capsys, "--store", str(tmp_path / "s.db"), "profile", "--target",
                          reference_server, "--max-prompt", "100000", "--max-batch", "4",
                          "--out", str(out))
    assert rc == 0, err
    assert "more than the server's context of 2048 tokens" in err and "up to 2047" in err
    assert json.loads(stdout)["workers"] == ["monolithic"]
    prof = json.loads(out.read_text())
    assert prof["workers"]["monolithic"]["prefill"]["x_max"] == 2047
    # what the server says of its model: tiny's 4 layers x 2 KV heads x 32 dims, K and V, float32
    assert (prof["kv_bytes_per_token"], prof["meta"]["model"]) == (2 * 4 * 2 * 32 * 4, "tiny")
    assert prof["meta"]["max_model_len"] == 2048
    assert prof["meta"]["mixed_step"] == prof["workers"]["monolithic"]["mixed_source"] == "measured"


@pytest.mark.parametrize("argv,needle", [
    (["--target", "notaurl"], "is not an http:// or https:// URL"),
    (["--target", "http://127.0.0.1:1", "--vocab", "0"], "--vocab"),
    (["--spec", "h200", "--run", "foo"], "--run applies to --from-store only"),
    (["--from-store", "--layout", "intra"], "--layout applies to --target only"),
    (["--target", "http://127.0.0.1:1", "--model-shape", "llama3-8b"], "--model-shape applies"),
    (["--from-store", "--tp", "2"], "--tp applies to --spec only"),
    (["--spec", "h200", "--tp", "3"], "the TP size must divide both"),
    (["--spec", "h200", "--gpu-memory-utilization", "1.5"], "must be above 0 and at most 1"),
])
def test_profile_flags_are_checked_for_their_mode(capsys, tmp_path, argv, needle):
    assert_user_error(capsys, needle, "profile", *argv, "--out", str(tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()


# ---- simulate (problems 3, 6, 7) ------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [("--limit", "0"), ("--limit", "-5"),
                                        ("--max-num-seqs", "0"), ("--num-blocks", "0"),
                                        ("--slo-ttft", "-1"), ("--slo-tpot", "0")])
def test_simulate_rejects_nonsense_numbers(capsys, spec_profile, flag, value):
    assert_user_error(capsys, f"argument {flag}", "simulate", "--workload", "azure-conv",
                      "--profile", spec_profile, f"{flag}={value}")


def test_simulate_says_no_layout_served_a_workload_the_cache_cannot_hold(capsys, spec_profile):
    rc, out, err = cli(capsys, "simulate", "--workload", "azure-conv", "--profile", spec_profile,
                       "--num-blocks", "1", "--limit", "50")
    assert rc == 0, err
    assert "best: none" in out and "no layout served the workload" in out
    assert out.count("no request completed: 50 of 50 rejected") == 3
    rc, out, _ = cli(capsys, "simulate", "--workload", "azure-conv", "--profile", spec_profile,
                     "--num-blocks", "1", "--limit", "50", "--json")
    assert json.loads(out)["best"] is None


def test_simulate_names_the_closest_layout_when_no_layout_meets_the_slos(capsys, spec_profile):
    # SLOs no layout can meet (a microsecond to the first token): not an empty answer, but the
    # layout that comes closest, by the same rule as the best one (lowest p99 TBT, ties to the
    # simplest), and the note says so.
    from gpuprobe.perf.metrics import TBT_TOLERANCE

    argv = ("simulate", "--workload", "azure-conv", "--profile", spec_profile, "--limit", "50",
            "--slo-ttft", "0.000001", "--slo-tbt", "0.000001")
    rc, out, err = cli(capsys, *argv, "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert all(s["slo_attainment"] == 0.0 for s in res["layouts"].values())
    best = res["best"]
    assert best in res["layouts"]
    lowest = min(s["tbt_p99_s"] for s in res["layouts"].values())
    assert res["layouts"][best]["tbt_p99_s"] <= lowest * (1 + TBT_TOLERANCE)
    assert any(n.startswith(f"no layout meets these SLOs; {best} comes closest") for n in res["notes"])
    rc, out, _ = cli(capsys, *argv)
    assert rc == 0 and f"best: {best}" in out and f"no layout meets these SLOs; {best}" in out


def test_simulate_table_shows_goodput_and_help_shows_defaults(capsys, spec_profile):
    rc, out, _ = cli(capsys, "simulate", "--workload", "azure-conv", "--profile", spec_profile,
                     "--limit", "20", "--layouts", "monolithic")
    assert rc == 0 and "goodput_rps_per_device=" in out and "best: monolithic" in out
    rc, out, _ = cli(capsys, "simulate", "--help")
    for text in ("(default monolithic,intra,cross)", "(default chat: TTFT 2 s, TPOT 0.1 s, 90%)",
                 "(default 256)", "as JSON"):
        assert text in " ".join(out.split()), text


def test_an_empty_stored_workload_is_a_user_error(capsys, tmp_path, spec_profile):
    from gpuprobe.store import Store

    db = str(tmp_path / "s.db")
    with Store.open(db) as store:
        store.save_workload("none", pd.DataFrame(
            {"arrival_s": [], "prompt_tokens": [], "output_tokens": []}))
    assert_user_error(capsys, "'none' is empty", "--store", db, "simulate", "--workload", "none",
                      "--profile", spec_profile)


# ---- serve and validate: checked before anything starts (problems 3, 4, 5) ------------------

@pytest.mark.parametrize("argv,needle", [
    (["serve", "--port", "99999"], "argument --port: must be 0-65535"),
    (["serve", "--max-num-seqs", "0"], "argument --max-num-seqs"),
    (["serve", "--kv-cache-mb", "0"], "argument --kv-cache-mb"),
    (["validate", "--workload", "azure-conv", "--model", "nosuch"], "unknown model 'nosuch'"),
    (["validate", "--workload", "azure-conv", "--prefill-share", "1"], "--prefill-share"),
    (["validate", "--workload", "azure-conv", "--load", "5"], "must be at most 2"),
    (["validate", "--workload", "azure-conv", "--rate", "0"], "argument --rate"),
    (["validate", "--workload", "azure-conv", "--limit", "1"], "argument --limit"),
    (["validate", "--workload", "azure-conv", "--token-scale", "0"], "argument --token-scale"),
    (["validate", "--workload", "azure-conv", "--replays", "0"], "argument --replays"),
])
def test_serve_and_validate_check_flags_up_front(capsys, argv, needle):
    t0 = time.monotonic()
    assert_user_error(capsys, needle, *argv)
    assert time.monotonic() - t0 < 10  # no model loaded, no server started


def test_validate_without_cuda_fails_before_starting_servers(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    rc, _, err = cli(capsys, "validate", "--workload", "azure-conv", "--device", "cuda")
    assert rc == 1 and "no CUDA device visible to torch" in err


def test_a_server_that_fails_to_start_is_explained_by_its_log(tmp_path):
    from gpuprobe.server.launch import start_server

    log = tmp_path / "intra.log"
    with pytest.raises(GpuprobeError) as exc:
        start_server("tiny", "intra", log_path=str(log), prefill_share=1)
    assert f"its log {log} ends:" in str(exc.value)
    assert "argument --prefill-share: must be between 0 and 1" in str(exc.value)


def test_validate_keeps_its_logs_after_a_failure_only():
    from gpuprobe.validate.run import _log_dir

    with _log_dir(None) as ok:
        assert os.path.isdir(ok)
    assert not os.path.exists(ok)
    with pytest.raises(GpuprobeError), _log_dir(None) as failed:
        raise GpuprobeError("server exited")
    assert os.path.isdir(failed)
    os.rmdir(failed)


# ---- the time budget (problem 9) ------------------------------------------------------------

def test_phase_guard_does_not_wait_when_the_phase_itself_is_not_covered():
    from gpuprobe.validate.cpu_watch import PhaseGuard

    ran = []
    guard = PhaseGuard(time.monotonic() + 20, phases_left=1, phase_s=30, max_wait_s=30)
    t0 = time.monotonic()
    guard("last phase", lambda: ran.append(time.monotonic() - t0))
    assert ran and ran[0] < 0.5  # no 1 s quiet-window: 20 s left is less than the phase's 30


# ---- the OpenAI API (problem 8) -------------------------------------------------------------

def _post(url: str, path: str, body: dict) -> tuple[int, dict]:
    r = requests.post(url + path, json=body, timeout=60)
    return r.status_code, r.json()


def test_n_other_than_one_is_refused(reference_server):
    status, body = _post(reference_server, "/v1/completions", {"prompt": "hi", "max_tokens": 2,
                                                               "n": 2})
    assert status == 400 and body["error"]["param"] == "n" and "vLLM" in body["error"]["message"]


def test_an_unknown_model_is_404_and_the_served_one_or_none_works(reference_server):
    status, body = _post(reference_server, "/v1/completions",
                         {"prompt": "hi", "max_tokens": 2, "model": "gpt-4"})
    assert status == 404
    assert body["error"] == {"message": "The model `gpt-4` does not exist.",
                             "type": "invalid_request_error", "param": "model",
                             "code": "model_not_found"}
    for extra in ({}, {"model": "tiny"}):
        status, body = _post(reference_server, "/v1/completions",
                             {"prompt": "hi", "max_tokens": 2, "ignore_eos": True, **extra})
        assert status == 200 and body["usage"]["completion_tokens"] == 2


def test_chat_names_a_bad_role_before_the_content(reference_server):
    status, body = _post(reference_server, "/v1/chat/completions", {"messages": [{"role": "x"}]})
    assert status == 400 and "'messages[0].role' must be one of" in body["error"]["message"]
    assert "got 'x'" in body["error"]["message"]


def test_an_overlong_chat_without_max_tokens_says_the_prompt_alone_is_too_long(reference_server):
    messages = [{"role": "user", "content": "hello world " * 1500}]
    status, body = _post(reference_server, "/v1/chat/completions", {"messages": messages})
    msg = body["error"]["message"]
    assert status == 400 and body["error"]["param"] == "messages"
    # refused by its byte length before tokenising (it cannot fit whatever max_tokens is)
    assert "maximum context length is 2048 tokens" in msg and "max_tokens" not in msg
