"""The recheck compares step times with the calibration's for the same shapes."""
import pandas as pd
import pytest

from gpuprobe.validate.recheck import bracket_factors, same_shape_ratio


def steps(rows):
    return pd.DataFrame(rows, columns=["num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs",
                                       "num_decode_ctx_tokens", "duration_s"])


BEFORE = steps([(32, 1, 0, 0, 0.010)] * 3 + [(128, 1, 0, 0, 0.020)] * 3 + [(0, 0, 8, 300, 0.003)] * 5)


def test_same_shapes_slower_by_a_fifth_read_1_2_and_new_shapes_are_ignored():
    now = steps([(32, 1, 0, 0, 0.012)] * 2 + [(128, 1, 0, 0, 0.024)] * 2 + [(0, 0, 8, 300, 0.0036)] * 3
                + [(777, 1, 0, 0, 5.0)] * 4 + [(16, 1, 0, 8, 9.0)])  # unseen shape, mixed step
    assert same_shape_ratio(now, BEFORE) == pytest.approx(1.2)


def test_too_few_comparable_steps_give_none():
    assert same_shape_ratio(steps([(32, 1, 0, 0, 0.012)] * 2), BEFORE) is None
    assert same_shape_ratio(steps([(999, 1, 0, 0, 0.1)] * 9), BEFORE) is None


def test_replays_between_the_calibrations_get_an_interpolated_factor():
    f = bracket_factors((0, 10), (90, 100), {"w": 1.5, "v": None}, [(10, 20), (45, 55), (80, 90)])
    assert [round(x["w"], 3) for x in f] == [round(1 + 0.5 * x, 3) for x in (10 / 90, 45 / 90, 80 / 90)]
    assert all(x["v"] == 1.0 for x in f)
