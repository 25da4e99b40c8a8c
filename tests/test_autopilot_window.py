"""What a decision reads of the server (a real store, rows as the server writes them): the
window's arrivals as they stand now (finished, in flight, refused), the backlog from before
it, the load line; and the prediction under overload, ranked by SLO attainment rather than
given up on."""
from __future__ import annotations

import pandas as pd

from gpuprobe.autopilot import outcome
from gpuprobe.autopilot.inputs import parse_slo, predict, window_workload
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.server.telemetry import arrival_record
from gpuprobe.store import Store
from gpuprobe.workloads.synth import synthesize

NOW = 1_000_000.0


def _arrival(rid, t, status="admitted", reason=None, prompt=100, max_tokens=50):
    return arrival_record("r", "h", rid, arrival_s=t, prompt_tokens=prompt, max_tokens=max_tokens,
                          status=status, reason=reason, num_in_flight=0, num_waiting=0)


def test_the_window_is_what_arrived_as_it_stands(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.insert_arrivals([
            _arrival("early", NOW - 20),                      # before the window, still running
            _arrival("done", NOW - 2.5), _arrival("running", NOW - 2.0),
            _arrival("busy", NOW - 1.5, "http_429", "max_queue_wait"),
            _arrival("long", NOW - 1.0, "http_400", "context_length_exceeded", prompt=3000,
                     max_tokens=None)])
        store.insert_requests([{"source": "server", "request_id": "done", "arrival_s": NOW - 2.5,
                                "finish_s": NOW - 0.5, "prompt_tokens": 100, "output_tokens": 37,
                                "status": "ok"},
                               {"source": "server", "request_id": "busy", "arrival_s": NOW - 1.5,
                                "finish_s": NOW - 1.5, "prompt_tokens": 100, "output_tokens": 0,
                                "status": "http_429"}])
        rows = outcome.recent_window(store, NOW, 3.0)
        backlog = outcome.backlog_before(store, NOW - 3.0, NOW)
        empty = outcome.recent_window(store, NOW + 100, 3.0)
    assert list(rows.request_id) == ["done", "running", "busy", "long"]
    assert list(rows.status) == ["ok", "in_flight", "http_429", "http_400"]
    assert list(rows.output_tokens[:3]) == [37, 50, 50]  # as served, else as asked for
    load = outcome.load_summary(rows, 3.0, backlog)
    assert load == {"arrivals": 4, "arrivals_per_s": 1.333, "finished": 1, "in_flight": 2,
                    "backlog": 1, "refused": {"max_queue_wait": 1, "context_length_exceeded": 1}}
    assert outcome.load_text(load) == (
        "load: 4 arrivals (1.333/s), 1 finished, 2 in flight (1 from before), 2 refused "
        "(max_queue_wait 1, context_length_exceeded 1)")
    # the load a layout serves: served, in flight, turned away for overload; not the 400
    wl = window_workload(rows)
    assert list(wl.prompt_tokens) == [100, 100, 100] and list(wl.output_tokens) == [37, 50, 50]
    assert empty.empty  # nothing arrived: no traffic


def test_rows_written_before_arrivals_count_as_they_finished(tmp_path):
    with Store.open(tmp_path / "s.db") as store:
        store.insert_requests([{"source": "server", "request_id": "old", "arrival_s": NOW - 1,
                                "finish_s": NOW - 0.5, "prompt_tokens": 9, "output_tokens": 3,
                                "status": "ok"}])
        rows = outcome.recent_window(store, NOW, 3.0)
    assert list(rows.status) == ["ok"] and list(rows.output_tokens) == [3]


def test_overload_ranks_by_attainment_instead_of_holding():
    profile, slo = roofline_profile("llama3-8b", "l40s"), parse_slo("ttft_p99=1s,tbt_p99=100ms,attain=0.9")
    lengths = pd.DataFrame({"prompt_tokens": [8, 1000], "output_tokens": [24, 16]})
    wl = synthesize(20.0, 3.0, lengths, mix_shift=("prefill-heavy", "prefill-heavy"), seed=1)
    out = predict(wl, profile, slo, "window")
    att = [c["slo_attainment"] for c in out["candidates"]]
    assert out["overloaded"] and not any(c["meets_slo"] for c in out["candidates"])
    # cross meets 31% of the requests' SLO there, intra 12%, monolithic none: cross, to act on
    assert out["layout"] == "cross" and att[0] > att[1] > att[2] and "overload" in out["source"]
