"""Which layout is best: attainment, then p99 TBT, ties within resolution go to the simplest."""
from gpuprobe.perf.metrics import pick_best, tied_best


def s(att, p99, n=300):
    return {"slo_attainment": att, "tbt_p99_s": p99, "num_requests": n}


def test_clear_winner_on_attainment():
    assert pick_best({"monolithic": s(0.3, 1.2), "intra": s(0.6, 0.05), "cross": s(0.45, 0.03)}) == "intra"


def test_attainment_within_two_standard_errors_ties_then_p99_decides():
    # 0.41 vs 0.373 on 300 requests: 2 SE = 0.057, a tie; cross's p99 TBT is 25% lower
    summ = {"monolithic": s(0.26, 1.49), "intra": s(0.41, 0.045), "cross": s(0.373, 0.036)}
    assert tied_best(summ) == ["cross"]
    assert pick_best(summ) == "cross"
    # the same gap on 3,000 requests is real
    summ = {k: {**v, "num_requests": 3000} for k, v in summ.items()}
    assert pick_best(summ) == "intra"


def test_one_late_request_in_300_does_not_beat_a_full_score():
    # At 300 of 300 the plain binomial error is 0, and one late request decided the layout;
    # with two successes and two failures added, 299 ties 300 and p99 TBT decides.
    summ = {"intra": s(299 / 300, 0.0339), "cross": s(1.0, 0.0300)}
    assert tied_best(summ) == ["intra", "cross"]
    assert pick_best(summ) == "intra"
    # ten late requests are a real difference
    assert tied_best({"intra": s(290 / 300, 0.0339), "cross": s(1.0, 0.0300)}) == ["cross"]


def test_p99_within_tolerance_goes_to_the_simpler_layout():
    summ = {"monolithic": s(1.0, 0.032), "intra": s(1.0, 0.0134), "cross": s(1.0, 0.0122)}
    assert pick_best(summ) == "intra"               # 10% apart: within 15%
    assert tied_best(summ) == ["intra", "cross"]
    assert pick_best(summ, tbt_tolerance=0.05) == "cross"


def test_nan_p99_and_empty():
    assert pick_best({}) is None
    assert pick_best({"intra": s(0.0, float("nan")), "cross": s(0.0, float("nan"))}) == "intra"
    assert pick_best({"intra": s(0.5, float("nan")), "cross": s(0.5, 0.02)}) == "cross"



def test_replay_range_is_min_and_max_per_metric():
    from gpuprobe.validate.verdict import replay_range

    runs = [{"ttft_p50_s": 0.5, "tbt_p50_s": 0.004}, {"ttft_p50_s": 0.6, "tbt_p50_s": float("nan")},
            {"ttft_p50_s": 0.8, "tbt_p50_s": 0.004}]
    out = replay_range({"intra": runs, "cross": runs[:1]})
    assert out["intra"]["ttft_p50_s"] == [0.5, 0.8]
    assert out["intra"]["tbt_p50_s"] is None      # a replay without the figure: no range
    assert out["intra"]["throughput_tok_s"] is None
    assert all(v is None for v in out["cross"].values())  # one replay: nothing to compare
