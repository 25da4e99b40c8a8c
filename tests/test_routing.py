"""Which worker a request goes to, and what a lost worker's requests become, on a real (not
started) remote layout: least loaded first, idle ties in turn, lost workers skipped; a request
that streamed nothing runs again, one that streamed a token, or ran out of tries, fails."""
from __future__ import annotations

from gpuprobe.server import routing
from gpuprobe.server.layout_instance import LayoutInstance
from gpuprobe.server.openai_api import GenRequest
from gpuprobe.server.options import LayoutConfig
from gpuprobe.server.remote_handle import RemoteSpec, RemoteWorkerHandle
from gpuprobe.server.request_state import Tracked


def _layout() -> LayoutInstance:
    specs = [RemoteSpec(f"{r}{i}", r, f"127.0.0.{i}:9300") for r in ("prefill", "decode")
             for i in (1, 2)]
    inst = LayoutInstance(LayoutConfig("cross", num_prefill=2, num_decode=2, remote=True),
                          specs, on_message=None, remote=(None, "tiny", 2048))
    for spec in specs:
        w = RemoteWorkerHandle(spec, None, None)
        w.alive = True
        inst.workers[spec.worker_id] = w
    return inst


def _request(inst, owner: str, decode: str, tokens: int = 0, attempt: int = 0) -> Tracked:
    req = GenRequest("completion", "tiny", (1, 2), 8, 0.0, 1.0, None, True, True, False)
    t = Tracked(f"r-{owner}-{decode}-{tokens}-{attempt}", req, 0.0, layout=inst, owner=owner,
                decode_id=decode, attempt=attempt)
    t.token_times_s = [1.0] * tokens
    return t


def test_idle_workers_take_turns_and_the_least_loaded_wins():
    inst = _layout()
    picks = [routing.least_loaded(inst, ("prefill",), [], turn).worker_id for turn in range(4)]
    assert picks == ["prefill1", "prefill2", "prefill1", "prefill2"]
    busy = [_request(inst, "prefill1", "decode2"), _request(inst, "decode2", "decode2", 3)]
    assert [routing.least_loaded(inst, ("prefill",), busy, n).worker_id for n in range(2)] == \
        ["prefill2", "prefill2"]
    assert routing.least_loaded(inst, ("decode",), busy, 0).worker_id == "decode1"


def test_lost_workers_are_out_of_rotation():
    inst = _layout()
    inst.workers["decode1"].alive = False
    assert {routing.least_loaded(inst, ("decode",), [], n).worker_id for n in range(3)} == \
        {"decode2"}
    inst.workers["decode2"].alive = False
    assert routing.least_loaded(inst, ("decode",), [], 0) is None
    assert [w.worker_id for w in inst.in_rotation("prefill")] == ["prefill1", "prefill2"]


def test_what_a_lost_worker_leaves_runs_again_unless_it_streamed():
    inst = _layout()
    queued = _request(inst, "prefill1", "decode1")             # prefill not done: run again
    sent = _request(inst, "prefill2", "decode1", tokens=1)     # first token out, KV in flight
    decoding = _request(inst, "decode1", "decode1", tokens=5)  # on the lost worker
    elsewhere = _request(inst, "decode2", "decode2", tokens=5)
    tired = _request(inst, "prefill1", "decode1", attempt=routing.MAX_ATTEMPTS - 1)
    retry, fail = routing.after_loss(inst, "decode1", [queued, sent, decoding, elsewhere, tired])
    assert retry == [queued] and fail == [sent, decoding, tired]
    assert routing.after_loss(inst, "prefill2", [queued, sent, elsewhere]) == ([], [sent])
