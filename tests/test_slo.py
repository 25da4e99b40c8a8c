"""SLOs as the field names them: TTFT and TPOT per request (at a percentile over requests),
ITL over every token gap pooled; older spellings mapped explicitly; records carry the names."""
import numpy as np
import pytest

from gpuprobe.decide.slo import parse_slo
from gpuprobe.errors import UserError
from gpuprobe.perf.metrics import Slo, aggregate, meets_slo, per_request


def _summary(slo: Slo) -> dict:
    """Ten requests of 101 tokens, 10 ms apart, arriving 1 s apart with a 0.1 s TTFT; one of
    them stalls 400 ms once (a prefill in its batch): its TPOT is 14 ms, its worst gap 410 ms."""
    arrival = np.arange(10.0)
    first = arrival + 0.1
    times = [f + 0.01 * np.arange(101) for f in first]
    times[3] = np.r_[times[3][:50], times[3][50:] + 0.4]
    last = np.array([t[-1] for t in times])
    req = per_request(arrival, first, last, np.full(10, 101))
    gaps = np.concatenate([np.diff(t) for t in times])
    return aggregate(req, gaps, slo)


def test_tpot_is_per_request_and_itl_pools_the_gaps():
    s = _summary(Slo())
    assert s["tpot_p50_s"] == pytest.approx(0.010)
    assert s["tpot_p99_s"] == pytest.approx(0.010 + 0.004 * 0.91, rel=1e-3)  # one request of ten
    assert s["tbt_p99_s"] == pytest.approx(0.010)  # 1 gap in 1,000 stalls: below the p99
    # the same stall judged both ways: TPOT p99 <= 12 ms fails, ITL p99 <= 12 ms holds
    assert not meets_slo(s, parse_slo("tpot_p99=12ms"))
    assert meets_slo(s, parse_slo("tpot=15ms,itl_p99=12ms"))
    assert meets_slo(s, parse_slo("tpot_p90=12ms"))


def test_older_spellings_map_explicitly():
    tbt = parse_slo("tbt=50ms")  # was the per-request mean: TPOT
    assert (tbt.tpot_s, tbt.tpot_pct, tbt.itl_s) == (0.05, None, None)
    old = parse_slo("tbt_p99=100ms")  # was: each request's mean and the pooled p99 <= 100 ms
    assert (old.tpot_s, old.tpot_pct, old.itl_s, old.itl_pct) == (0.1, None, 0.1, 99)
    with pytest.raises(UserError, match="itl_p99=50ms"):
        parse_slo("itl=50ms")  # pooled gaps have no per-request target


def test_records_name_each_figure_and_read_older_ones():
    slo = parse_slo("ttft_p99=1s,tpot_p90=40ms,itl_p99=150ms")
    d = slo.to_dict()
    assert (d["tpot_s"], d["tpot_pct"], d["itl_s"], d["itl_pct"]) == (0.04, 90, 0.15, 99)
    assert "pooled" in d["definitions"]["itl"] and "per request" not in d["definitions"]["itl"]
    assert Slo.from_dict(d) == slo
    older = Slo.from_dict({"ttft_s": 2.0, "tbt_s": 0.1, "tbt_pct": 99, "attain": 0.9})
    assert (older.tpot_s, older.tpot_pct, older.itl_s, older.itl_pct) == (0.1, None, 0.1, 99)
