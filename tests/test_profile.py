"""Profiles from stored step records (known coefficients), poor fits flagged, atomic output,
and a short live calibration of the tiny reference server."""
import json

import numpy as np
import pytest

from gpuprobe.cli.main import main
from gpuprobe.perf.profile import from_store, load_profile
from gpuprobe.perf.profile_fit import fit_worker, step_gap_fit
from gpuprobe.store import Store


def _steps(noise=0.0, sizes=(16, 32, 64, 128, 256, 512, 1024), seed=0):
    rng = np.random.default_rng(seed)
    rows, t = [], 1000.0
    for T in sizes:
        for _ in range(3):
            d = (0.002 + 1e-5 * T + 2e-9 * T * T) * (1 + noise * rng.standard_normal())
            rows.append(dict(run_id="r1", layout="monolithic", role="mixed", start_s=t, duration_s=abs(d),
                             num_prefill_tokens=T, num_decode_seqs=0, num_decode_ctx_tokens=0))
            t += abs(d) + 0.001
    for B in (1, 2, 4, 8, 16):
        for L in (40, 300):
            for j in range(10):
                C = B * (L + j)
                d = (0.001 + 2e-4 * B + 1e-6 * C) * (1 + noise * rng.standard_normal())
                rows.append(dict(run_id="r1", layout="monolithic", role="mixed", start_s=t,
                                 duration_s=abs(d), num_prefill_tokens=0, num_decode_seqs=B,
                                 num_decode_ctx_tokens=C))
                t += abs(d) + 0.001
    return rows


def test_from_store_recovers_known_coefficients(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.insert_steps(_steps())
        p = from_store(store, "r1")
    w = p.workers["monolithic"]
    assert w.prefill.coef == pytest.approx((0.002, 1e-5, 2e-9), rel=1e-4)
    assert w.decode.coef == pytest.approx((0.001, 2e-4, 1e-6), rel=1e-4)
    assert w.step_overhead_s == pytest.approx(0.001, rel=1e-3)
    assert w.prefill.confidence == "high" and w.decode.confidence == "high"


def test_poor_fits_are_flagged():
    import pandas as pd
    w = fit_worker(pd.DataFrame(_steps(sizes=(64, 128))), "m")
    assert w.prefill.confidence == "low"
    noisy = fit_worker(pd.DataFrame(_steps(noise=3.0, seed=2)), "m")
    assert "low" in (noisy.prefill.confidence, noisy.decode.confidence)


def test_cli_from_store_and_spec_write_json(tmp_path, capsys):
    db = tmp_path / "s.db"
    with Store.open(db) as store:
        store.insert_steps(_steps())
    out = tmp_path / "p.json"
    assert main(["profile", "--from-store", "--run", "r1", "--store", str(db), "--out", str(out)]) == 0
    assert load_profile(str(out)).workers["monolithic"].decode.n_points > 0
    assert main(["profile", "--spec", "l40s", "--store", str(db), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["meta"]["gpu"] == "L40S"


def test_unreachable_target_fails_cleanly_and_writes_nothing(tmp_path, capsys):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a free port nobody listens on
    out = tmp_path / "p.json"
    rc = main(["profile", "--target", f"http://127.0.0.1:{port}", "--store", str(tmp_path / "s.db"),
               "--out", str(out)])
    assert rc == 1 and not out.exists()
    assert "cannot profile" in capsys.readouterr().err
    assert list(tmp_path.glob(".profile-*")) == []


def test_max_batch_caps_the_decode_bursts_and_bad_values_are_one_line(tmp_path, capsys):
    from gpuprobe.workloads.calibrate import decode_batches_for
    assert decode_batches_for(16) == (1, 2, 4, 8, 16)
    assert decode_batches_for(12) == (1, 2, 4, 8, 12)  # the cap itself is measured: the fit's x_max
    assert decode_batches_for(2) == (1, 2)
    out = tmp_path / "p.json"
    for value, said in (("1", "--max-batch must be >= 2"), ("0", "argument --max-batch: must be at least 1"),
                        ("many", "argument --max-batch: 'many' is not an integer")):
        try:  # refused before any request is sent (port 9 would fail otherwise)
            rc = main(["profile", "--target", "http://127.0.0.1:9", "--max-batch", value, "--out", str(out),
                       "--store", str(tmp_path / "s.db")])
        except SystemExit as exc:  # argparse's own refusals
            rc = exc.code
        err = capsys.readouterr().err.strip()
        assert rc == 2 and said in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.timeout(120)
def test_live_profile_of_tiny_server(tmp_path):
    from gpuprobe.workloads.calibrate import run_calibration
    from gpuprobe.perf.profile import from_client
    from gpuprobe.server import launch

    bursts = []
    with launch.start_server("tiny", "monolithic") as srv:
        cal = run_calibration(srv.url, prefill_sizes=(16, 64, 128, 256, 512), decode_batches=(1, 4, 8),
                              decode_prompts=(32,), decode_tokens=8, reps=1, vocab=512,
                              detail=bursts.append)
    p = from_client(cal)
    w = p.workers["monolithic"]
    assert w.prefill.n_points == 5 and w.decode.n_points == 3
    assert [b.split(" in ")[0] for b in bursts] == [f"decode burst {i}/3: {n} streams at prompt 32"
                                                    for i, n in ((1, 1), (2, 4), (3, 8))]
    # The idle probes: every sweep size of 64-256 after each gap, twice, all after the sweeps.
    assert sorted((r["idle_s"], r["prompt_tokens"]) for r in cal["wake"]) == sorted(
        (g, n) for g in (0.03, 0.1, 0.3) for n in (64, 128, 256) for _ in range(2))
    assert all(r["status"] == "ok" and r["arrival_s"] > cal["t1_s"] for r in cal["wake"])
    assert [g for g, _ in w.wake] == [0.03, 0.1, 0.3]
    assert all(b >= a >= 0 for (_, a), (_, b) in zip(w.wake, w.wake[1:]))
    assert 0 < w.step_fn()(256, 256 ** 2, 0, 0) < 5.0


@pytest.mark.timeout(120)
def test_a_failing_large_burst_ends_its_prompts_bursts_when_asked(tmp_path):
    """profile --target keeps the bursts that worked when a larger one fails (a slow server
    times it out); here a real tiny server admits 3 requests at a time and refuses the rest."""
    from gpuprobe.errors import GpuprobeError
    from gpuprobe.workloads.calibrate import run_calibration
    from gpuprobe.server import launch

    # 300 tokens a stream: the six of a burst overlap however slowly a busy machine sends them
    # (with 4, the first three could finish before the last arrived, and none was refused)
    small = dict(prefill_sizes=(16, 32), decode_batches=(1, 2, 6), decode_prompts=(32,),
                 decode_tokens=300, reps=1, vocab=512, wake_gaps=())
    with launch.start_server("tiny", "monolithic", max_num_seqs=3, max_queue=0) as srv:
        cal = run_calibration(srv.url, keep_partial=True, **small)
        with pytest.raises(GpuprobeError, match="decode burst B=6"):  # without it, the failure stands
            run_calibration(srv.url, **small)
    assert [B for B, _, _ in cal["decode"]] == [1, 2]
    assert len(cal["cut"]) == 1 and cal["cut"][0].startswith("decode burst of 6 streams at prompt 32 failed")


def test_batched_prefills_and_per_token_gaps_are_fitted():
    """Steps with k equal prompts cost a + b*T + c*T^2/k + e*k; each token out adds g to the
    gap after its step, which ends up in the per-sequence decode cost (d1) and per prompt (e)."""
    import pandas as pd
    a, b, c, e, d0, d1, d2, g0, g = 0.002, 1e-5, 2e-9, 4e-4, 0.001, 2e-4, 1e-6, 3e-4, 5e-5
    rows, t = [], 0.0

    def add(T, k, B, C, d):
        nonlocal t
        rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=d,
                         num_prefill_tokens=T, num_prefill_seqs=k, num_decode_seqs=B,
                         num_decode_ctx_tokens=C))
        t += d + g0 + g * (B + (k if T else 0))
    for n in (16, 32, 64, 128, 256, 512):
        for k in (1, 2, 4):
            add(n * k, k, 0, 0, a + b * n * k + c * (n * k) ** 2 / k + e * k)
    for B in (1, 2, 4, 8, 16, 32):
        for L in (40, 300):
            add(0, 0, B, B * L, d0 + d1 * B + d2 * B * L)
    w = fit_worker(pd.DataFrame(rows), "m")
    assert w.step_overhead_s == pytest.approx(g0, rel=1e-3)
    assert w.prefill.coef == pytest.approx((a, b, c, e + g), rel=1e-3)
    # the simulator's view of a step of 4 prompts of 64 tokens: T=256, Q=4*64^2
    step = w.step_fn()(256, 4 * 64 ** 2, 0, 0) - w.step_overhead_s
    assert step == pytest.approx(a + b * 256 + c * 4 * 64 ** 2 + 4 * (e + g), rel=1e-3)
    assert w.decode.coef == pytest.approx((d0, d1 + g, d2), rel=1e-3)


def test_waiting_for_the_next_prompt_is_not_loop_overhead():
    """A prefill worker fed one prompt at a time waits a client round trip between steps; with
    the server's request rows that wait is told from the loop's own gap."""
    import pandas as pd
    g0, g, roundtrip = 3e-4, 1e-4, 4e-3
    steps, reqs, t = [], [], 0.0
    for i in range(12):  # one-at-a-time sweep: the next prompt arrives after the round trip
        d = 0.003 + 0.001 * (i % 4)
        steps.append(dict(layout="intra", role="prefill", start_s=t, duration_s=d,
                          num_prefill_tokens=64 * (1 + i % 4), num_prefill_seqs=1,
                          num_decode_seqs=0, num_decode_ctx_tokens=0))
        reqs.append(dict(arrival_s=t - 1e-4, prefill_start_s=t))
        t += d + g0 + g + roundtrip
    for burst in range(3):  # bursts: k prompts arrived at once, steps back to back
        arrival = t - 1e-4
        for k in (2, 3, 4, 5):
            d = 0.004 * k
            steps.append(dict(layout="intra", role="prefill", start_s=t, duration_s=d,
                              num_prefill_tokens=64 * k, num_prefill_seqs=k,
                              num_decode_seqs=0, num_decode_ctx_tokens=0))
            reqs += [dict(arrival_s=arrival, prefill_start_s=t)] * k
            t += d + g0 + g * k
        t += 0.01  # idle until the next burst (over the 20 ms cut: not counted anyway)
    s, r = pd.DataFrame(steps), pd.DataFrame(reqs)
    gap0, per, before_prefill = step_gap_fit(s, r)
    assert gap0 == pytest.approx(g0, rel=1e-6) and per == pytest.approx(g, rel=1e-6)
    assert before_prefill == 0.0  # every step prefills here: nothing to tell apart
    blind = step_gap_fit(s)  # without the rows the round trips count as loop gaps
    assert blind[0] != pytest.approx(g0, rel=0.5) or blind[1] != pytest.approx(g, rel=0.5)


def test_padded_decode_attention_and_recorded_q_are_fitted():
    """A worker whose decode attention reads B * the longest context (one padded call) is
    fitted on those positions and marked 'padded', so the simulator charges them; unequal
    prompts in one prefill step are fitted on the recorded Q and the exact prompt count."""
    import pandas as pd
    from gpuprobe.perf.profile_fit import decode_attention_of
    a, b, c, e, d0, d1, d2 = 0.002, 1e-5, 2e-9, 4e-4, 0.001, 2e-4, 1e-6
    rng = np.random.default_rng(3)
    rows, t = [], 0.0
    for _ in range(60):  # prefill steps of 1-4 prompts of unequal lengths
        lens = rng.integers(8, 600, rng.integers(1, 5))
        T, Q, k = int(lens.sum()), int((lens ** 2).sum()), len(lens)
        d = a + b * T + c * Q + e * k
        rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=d,
                         num_prefill_tokens=T, num_prefill_seqs=k, prefill_q_tokens2=Q,
                         num_decode_seqs=0, num_decode_ctx_tokens=0, num_decode_padded_tokens=0))
        t += d + 1.0  # idle between steps: no loop overhead to fit
    for _ in range(80):  # decode steps over unequal contexts
        ctx = rng.integers(10, 700, rng.integers(1, 33))
        B, C, P = len(ctx), int(ctx.sum()), int(ctx.max()) * len(ctx)
        d = d0 + d1 * B + d2 * P
        rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=d,
                         num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=B,
                         num_decode_ctx_tokens=C, num_decode_padded_tokens=P))
        t += d + 1.0
    steps = pd.DataFrame(rows)
    assert decode_attention_of(steps) == "padded"
    w = fit_worker(steps, "m")
    assert w.decode_attention == "padded"
    assert w.decode.coef == pytest.approx((d0, d1, d2), rel=1e-3)
    assert w.prefill.coef == pytest.approx((a, b, c, e), rel=1e-3)
    # records from before the columns: paged, C the sum of the contexts
    old = steps.drop(columns=["num_decode_padded_tokens", "prefill_q_tokens2"])
    assert decode_attention_of(old) == "paged" and fit_worker(old, "m").decode_attention == "paged"


def test_the_gap_before_a_prefill_step_is_not_every_steps_overhead():
    """A worker that prefills and decodes waits longer before a prefill step (it takes the
    prompts in); that is fitted apart, so decode steps keep the loop's own gap, and a shape
    seen once does not tilt the fit."""
    import pandas as pd
    g0, before, t = 3e-4, 1e-3, 0.0
    rows, reqs = [], []
    for burst in range(8):
        B = (2, 4)[burst % 2]
        t += 0.5
        reqs += [dict(arrival_s=t - 1e-3, prefill_start_s=t)] * B  # prompts already there
        rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=0.004,
                         num_prefill_tokens=32 * B, num_prefill_seqs=B, num_decode_seqs=0,
                         num_decode_ctx_tokens=0))
        t += 0.004 + g0
        for _ in range(20):
            rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=0.002,
                             num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=B,
                             num_decode_ctx_tokens=B * 40))
            t += 0.002 + g0
        if burst == 3:  # a decode step of a shape seen once, a 15 ms gap after it
            rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=0.002,
                             num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=9,
                             num_decode_ctx_tokens=9 * 40))
            t += 0.002 + 0.015
            rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=0.002,
                             num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=B,
                             num_decode_ctx_tokens=B * 40))
            t += 0.002
        t += before  # a prompt arrived: the next step prefills it, after the longer gap
        reqs.append(dict(arrival_s=t - 0.002, prefill_start_s=t))
        rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=0.003,
                         num_prefill_tokens=64, num_prefill_seqs=1, num_decode_seqs=0,
                         num_decode_ctx_tokens=0))
        t += 0.003 + g0
    gap0, per_token, before_prefill = step_gap_fit(pd.DataFrame(rows), pd.DataFrame(reqs))
    assert gap0 == pytest.approx(g0, rel=0.05)
    assert before_prefill == pytest.approx(before, rel=0.05)
    assert per_token < 1e-5


def test_a_prefill_workers_gap_from_two_shapes_is_a_line_not_a_pooled_median():
    """A split prefill worker's calibration shows busy gaps of two shapes only: after a burst's
    first prompt (one KV handed over) and after full steps of six. The gap grows with the KVs
    handed over; the fit is the line through the two, not one median of both applied to every
    step (which charged single-prompt steps the six-prompt gap: 11 ms against 2-4 measured)."""
    import pandas as pd
    g0, g = 1.5e-3, 1.8e-3
    rows, reqs, t = [], [], 0.0
    for burst in range(14):
        t += 0.5
        arrival = t - 1e-3
        for k in (1, 6) if burst % 2 else (1, 6, 6):
            reqs += [dict(arrival_s=arrival, prefill_start_s=t)] * k
            rows.append(dict(layout="intra", role="prefill", start_s=t, duration_s=0.004 * k,
                             num_prefill_tokens=32 * k, num_prefill_seqs=k, num_decode_seqs=0,
                             num_decode_ctx_tokens=0))
            t += 0.004 * k + g0 + g * k
        if burst == 5:  # an odd shape, seen once
            reqs.append(dict(arrival_s=arrival, prefill_start_s=t))
            rows.append(dict(layout="intra", role="prefill", start_s=t, duration_s=0.01,
                             num_prefill_tokens=96, num_prefill_seqs=3, num_decode_seqs=0,
                             num_decode_ctx_tokens=0))
            t += 0.01 + 0.019
    gap0, per, _ = step_gap_fit(pd.DataFrame(rows), pd.DataFrame(reqs))
    assert gap0 == pytest.approx(g0, rel=0.02) and per == pytest.approx(g, rel=0.02)


def test_a_worker_whose_calibration_contexts_never_differ_is_still_fitted_padded():
    """Decode bursts of B equal prompts prefilled together: every step's contexts are equal,
    so the padded positions equal their sum. The records still say what the call read, and
    the worker is fitted padded: served traffic has unequal contexts, and the simulator must
    charge B x the longest, as the runner reads."""
    import pandas as pd
    from gpuprobe.perf.profile_fit import decode_attention_of
    rows, t = [], 0.0
    for B in (1, 2, 4, 8, 16, 32):
        for step in range(20):
            C = B * (33 + step)
            rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=0.002,
                             num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=B,
                             num_decode_ctx_tokens=C, num_decode_padded_tokens=C))
            t += 0.0023
    steps = pd.DataFrame(rows)
    assert decode_attention_of(steps) == "padded"
    assert fit_worker(steps, "m").decode_attention == "padded"
    blank = steps.assign(num_decode_padded_tokens=np.nan)  # an engine that writes no positions
    assert decode_attention_of(blank) == "paged"


def test_a_two_state_loop_gap_is_fitted_to_its_fast_state():
    """Between decode steps the loop takes 0.2 ms when the front handles the step's message on
    the other core and about 1 ms when it runs on this worker's core first. How often the
    second happens follows the load, and the front's CPU is charged apart (contention.py),
    so the fit keeps the loop's own gap: the fast state, here in 40% of the gaps, where a
    median would have read the slow one."""
    import pandas as pd
    fast, slow = 2e-4, 1e-3
    rng = np.random.default_rng(3)
    rows, t = [], 0.0
    for B in (1, 2, 4, 8):
        for i in range(40):
            rows.append(dict(layout="intra", role="decode", start_s=t, duration_s=0.002,
                             num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=B,
                             num_decode_ctx_tokens=B * 40))
            t += 0.002 + (fast if rng.random() < 0.4 else slow) * (1 + 0.02 * rng.random())
        t += 0.5  # idle between bursts
    gap0, per_token, _ = step_gap_fit(pd.DataFrame(rows))
    assert gap0 == pytest.approx(fast, rel=0.15) and abs(per_token) < 2e-5
