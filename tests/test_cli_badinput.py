"""An outside checker's bad input to the decision commands: one line naming the file, field or
flag, exit 2, no traceback, and nothing the user or the store already had is touched."""
import json
import time

import pytest

from cli_run import run_cli
from gpuprobe.cli.main import build_parser, main
from gpuprobe.perf.roofline import roofline_profile


def cli(capsys, *argv):
    rc, _, err = run_cli(capsys, *argv)
    return rc, [ln for ln in err.splitlines() if ln.strip()]


def test_a_flag_is_never_abbreviated():
    # `validate --profile p.json` (simulate's and recommend's input flag) was read as
    # --profile-out and would have overwritten the user's profile after the replays.
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["validate", "--workload", "w", "--profile", "p.json"])
    assert exc.value.code == 2


@pytest.fixture()
def good_profile():
    return json.loads(roofline_profile("llama3-8b", "h100").dumps())


def _broken(d, edit):
    d = json.loads(json.dumps(d))
    edit(d)
    return d


PROFILES = [
    ("workers-number", lambda d: d["workers"].__setitem__("monolithic", 3), "workers.monolithic"),
    ("workers-list", lambda d: d.__setitem__("workers", []), "workers"),
    ("workers-empty", lambda d: d.__setitem__("workers", {}), "workers"),
    ("coef-short", lambda d: d["workers"]["monolithic"]["prefill"].__setitem__("coef", [0.1]),
     "workers.monolithic.prefill.coef"),
    ("coef-nan", lambda d: d["workers"]["monolithic"]["prefill"].__setitem__("coef", [float("nan"), 0, 0]),
     "workers.monolithic.prefill.coef[0]"),
    ("coef-negative", lambda d: d["workers"]["monolithic"]["decode"].__setitem__("coef", [-1, 0, 0]),
     "workers.monolithic.decode.coef[0]"),
    ("terms", lambda d: d["workers"]["monolithic"]["decode"].__setitem__("terms", ["1", "Z", "C"]),
     "workers.monolithic.decode.terms"),
    ("scale", lambda d: d["workers"]["monolithic"].__setitem__("scale", 0), "workers.monolithic.scale"),
    ("link", lambda d: d["links"]["cross"].__setitem__("bytes_per_s", 0), "links.cross.bytes_per_s"),
    ("share", lambda d: d.__setitem__("prefill_share", 2), "prefill_share"),
]


@pytest.mark.parametrize("edit,field", [p[1:] for p in PROFILES], ids=[p[0] for p in PROFILES])
def test_a_wrong_shaped_profile_names_its_field(tmp_path, capsys, good_profile, edit, field):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_broken(good_profile, edit)))
    rc, lines = cli(capsys, "simulate", "--workload", "azure-conv", "--limit", "20",
                    "--profile", path, "--store", tmp_path / "s.db")
    assert rc == 2 and len(lines) == 1, lines
    assert f"p.json: not a gpuprobe profile: {field}:" in lines[0]


def test_the_roofline_profile_passes_the_shape_check(tmp_path, capsys, good_profile):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(good_profile))
    rc, lines = cli(capsys, "simulate", "--workload", "azure-conv", "--limit", "20",
                    "--layouts", "monolithic", "--profile", path, "--store", tmp_path / "s.db")
    assert rc == 0, lines


TOKENS = [("binary", b"\x00\x01\xff\xfe", "not a text file"),
          ("two-lines", b"abc\ndef", "the token must be one line of printable ASCII"),
          ("non-ascii", "caf\u20ac".encode(), "the token must be one line of printable ASCII")]


@pytest.mark.parametrize("data,needle", [t[1:] for t in TOKENS], ids=[t[0] for t in TOKENS])
def test_an_unusable_admin_token_file_is_named(tmp_path, capsys, data, needle):
    # It was an internal error, or "the server answered something that is not JSON" once
    # the header could not be sent.
    tok = tmp_path / "tok"
    tok.write_bytes(data)
    rc, lines = cli(capsys, "apply", "--recommendation", "1", "--target", "http://127.0.0.1:1",
                    "--admin-token-file", tok, "--store", tmp_path / "s.db")
    assert rc == 2 and len(lines) == 1, lines
    assert f"--admin-token-file {tok}: {needle}" in lines[0]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("flag", ["--for", "--window", "--history", "--interval"])
def test_autopilot_refuses_a_zero_length(tmp_path, capsys, good_profile, flag):
    # --for 0 ran until SIGTERM; --window 0 and --history 0 quietly fell back to other lengths.
    path = tmp_path / "p.json"
    path.write_text(json.dumps(good_profile))
    rc, lines = cli(capsys, "autopilot", "--target", "http://127.0.0.1:1", "--profile", path,
                    "--interval", "1s", "--for", "1s", flag, "0", "--store", tmp_path / "s.db")
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].endswith(f"{flag}: '0' must be more than 0")


def _forecast_file(tmp_path, edit):
    n = 6
    series = {k: {"t_s": [600.0 + 10 * i for i in range(n)], "mean": [v] * n, "hi80": [v * 1.2] * n}
              for k, v in (("requests_per_s", 2.0), ("prefill_tokens_per_s", 2000.0),
                           ("decode_tokens_per_s", 300.0))}
    f = {"bucket_s": 10.0, "series": series}
    edit(f)
    path = tmp_path / "f.json"
    path.write_text(json.dumps(f))
    return path


FORECASTS = [
    ("not-object", lambda f: f.clear() or f.update(x=1), "series"),
    ("series-string", lambda f: f["series"].__setitem__("requests_per_s", "abc"),
     "series.requests_per_s"),
    ("no-hi80", lambda f: f["series"]["requests_per_s"].pop("hi80"), "series.requests_per_s.hi80"),
    ("short", lambda f: f["series"]["decode_tokens_per_s"].__setitem__("mean", [1.0]),
     "series.decode_tokens_per_s.mean"),
    ("nan", lambda f: f["series"]["requests_per_s"].__setitem__("hi80", [float("nan")] * 6),
     "series.requests_per_s.hi80"),
    ("bucket", lambda f: f.__setitem__("bucket_s", -10), "bucket_s"),
]


@pytest.mark.parametrize("edit,field", [f[1:] for f in FORECASTS], ids=[f[0] for f in FORECASTS])
def test_a_wrong_shaped_forecast_file_names_its_field(tmp_path, capsys, good_profile, edit, field):
    # These were internal errors (KeyError, IndexError, a negative array size).
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(good_profile))
    path = _forecast_file(tmp_path, edit)
    rc, lines = cli(capsys, "recommend", "--workload", "azure-conv", "--limit", "50", "--profile",
                    prof, "--forecast-file", path, "--store", tmp_path / "s.db")
    assert rc == 2 and len(lines) == 1, lines
    assert f"--forecast-file {path}: {field}:" in lines[0]


FORECAST_FLAGS = [
    (["--series", ","], "--series: ',' names no series"),    # stored an empty forecast, exit 0
    (["--as-of", "99999"], "--as-of: '99999' is past the workload's end"),  # forecast zeros
    (["--bucket", "1s", "--horizon", "100d"], "--horizon: 8.64e+06 s is 8,640,000 buckets"),  # hung
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags,needle", FORECAST_FLAGS, ids=[f[0][0] for f in FORECAST_FLAGS])
def test_forecast_refuses_what_it_cannot_forecast(tmp_path, capsys, flags, needle):
    db = tmp_path / "s.db"
    assert cli(capsys, "synth", "--name", "w", "--rate", "1", "--duration", "60s", "--store", db)[0] == 0
    rc, lines = cli(capsys, "forecast", "--workload", "w", *flags, "--store", db)
    assert rc == 2 and len(lines) == 1, lines
    assert needle in lines[0]
    from gpuprobe.store import Store
    with Store.open(str(db)) as store:
        assert store.forecasts("w").empty and len(store.workloads()) == 1


def test_report_refuses_another_workloads_recommendation(tmp_path, capsys, good_profile):
    # It wrote the report: the other workload's figures under this recommendation's decision.
    db, prof = tmp_path / "s.db", tmp_path / "p.json"
    prof.write_text(json.dumps(good_profile))
    for name in ("a", "b"):
        assert cli(capsys, "synth", "--name", name, "--rate", "1", "--duration", "60s",
                   "--store", db)[0] == 0
    assert cli(capsys, "recommend", "--workload", "a", "--profile", prof, "--layouts", "monolithic",
               "--limit", "50", "--store", db)[0] == 0
    html = tmp_path / "r.html"
    rc, lines = cli(capsys, "report", "--workload", "b", "--recommendation", "1", "--out", html,
                    "--store", db)
    assert rc == 2 and "Traceback" not in "".join(lines), lines
    assert lines[-1].endswith("--recommendation 1 was made for workload 'a', not 'b': give "
                              "--workload a, or leave --recommendation out for the latest of 'b'")
    assert not html.exists()


def test_recommend_names_the_flag_that_was_wrong(tmp_path, capsys, good_profile):
    db, prof = tmp_path / "s.db", tmp_path / "p.json"
    prof.write_text(json.dumps(good_profile))
    assert cli(capsys, "synth", "--name", "w", "--duration", "10s", "--store", db)[0] == 0
    rc, lines = cli(capsys, "recommend", "--check", "999", "--store", db)  # said --recommendation
    assert rc == 2 and lines == ["gpuprobe recommend: error: --check 999: no such recommendation "
                                 "in this store (gpuprobe recommend stores one and prints its id)"]
    rc, lines = cli(capsys, "recommend", "--workload", "azure-conv", "--profile", prof, "--source",
                    "prometheus=http://127.0.0.1:1", "--store", db)  # said "needs one of" them
    assert rc == 2 and len(lines) == 1 and "--workload and --source: give one" in lines[0], lines


def test_fleet_checks_its_profile_before_asking_prometheus(tmp_path, capsys):
    # The profile was read only after the queries: a fleet with no Prometheus at the URL hid
    # the broken file, which surfaced as exit 2 only once Prometheus was up.
    bad = tmp_path / "p.json"
    bad.write_text("{")
    rc, lines = cli(capsys, "fleet", "--source", "prometheus=http://127.0.0.1:1", "--profile", bad,
                    "--store", tmp_path / "s.db")
    assert rc == 2 and len(lines) == 1 and f"{bad}: not a gpuprobe profile" in lines[0], lines


def test_plan_refuses_a_gpu_too_small_to_split():
    # --total-sms 1 wrote "prefill 8 SMs, decode -7 SMs" into the plan's README.
    argv = ["plan", "--recommendation", "1", "--engine", "vllm", "--out", "x", "--total-sms"]
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv + ["15"])
    assert exc.value.code == 2
    assert build_parser().parse_args(argv + ["16"]).total_sms == 16


@pytest.fixture()
def json_api():
    """A real HTTP server answering fixed JSON on /api/v1/*: what a --source URL may point at.
    Set `answers[path] = body` before the call."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            body = json.dumps(answers.get(self.path.split("?")[0], {})).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", answers
    srv.shutdown()
    srv.server_close()


def test_a_json_api_that_is_not_prometheus_is_named(tmp_path, capsys, json_api):
    # Its answer went on into the callers and came out as internal TypeErrors.
    url, answers = json_api
    answers["/api/v1/query_range"] = {"status": "success", "data": "not a result"}
    answers["/api/v1/query"] = {"status": "success", "data": {"resultType": "vector", "result": "x"}}
    for argv in (["analyze"], ["fleet"], ["forecast", "--no-store"]):
        rc, lines = cli(capsys, *argv, "--source", f"prometheus={url}", "--store", tmp_path / "s.db")
        assert rc == 1 and len(lines) == 1, (argv, lines)
        assert "answered JSON that is not a Prometheus result" in lines[0] and url in lines[0]


def test_analyze_shows_an_idle_window(tmp_path, capsys, json_api):
    # No token moved in the window: the prefill share is unknown, and printing it raised.
    url, answers = json_api
    now = time.time()
    zeros = [[now - 600 + 15 * i, "0"] for i in range(40)]
    answers["/api/v1/query_range"] = {"status": "success", "data": {
        "resultType": "matrix", "result": [{"metric": {}, "values": zeros}]}}
    rc = main(["analyze", "--source", f"prometheus={url}", "--since", "10m",
               "--store", str(tmp_path / "s.db")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "requests finished 0 over" in out.out and "prefill share n/a" in out.out


def test_analyze_names_a_prometheus_without_engine_counters(tmp_path, capsys, json_api):
    # An empty range answer reached a UserError the command had not imported: a NameError.
    url, answers = json_api
    answers["/api/v1/query_range"] = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    rc, lines = cli(capsys, "analyze", "--source", f"prometheus={url}", "--store", tmp_path / "s.db")
    assert rc == 2 and len(lines) == 1 and "no engine token counters" in lines[0], lines
