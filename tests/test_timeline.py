"""The timeline report's arithmetic (bench/timeline.py) on records of a known chain."""

import numpy as np
import pytest

from bench.timeline import per_launch, summarize


def chain(calls: int, q_ctas: int, g_ctas: int):
    """Records (start, waited, end, sm | tag << 32) in ns of a chain where projection i starts at
    t0 = 10000 (i + 1), the previous GEMM's end: its quantizer enters 1000 before t0, returns from
    its wait 500 after it and exits 1500 after it; its GEMM's CTAs enter from 800 before t0 (one
    CTA in four after the quantizer's exit) and exit evenly over [t0 + 9000, t0 + 10000]."""
    q, g = [], []
    for i in range(calls):
        t0 = 10000 * (i + 1)
        q += [(t0 - 1000 + c, t0 + 500 + c, t0 + 1500, 0) for c in range(q_ctas)]
        starts = [t0 - 800 + c for c in range(g_ctas * 3 // 4)] + [t0 + 2000 + c for c in range(g_ctas - g_ctas * 3 // 4)]
        ends = np.linspace(t0 + 9000, t0 + 10000, g_ctas)
        g += [(s, 0, int(e), 1 << 32) for s, e in zip(starts, ends)]
    return np.array(q, np.uint64), np.array(g, np.uint64)


def test_summary_of_a_known_chain():
    q, g = chain(4, 8, 100)
    s = summarize(q, g, 4)
    assert s["period"] == pytest.approx(10.0)
    assert s["q_start"] == pytest.approx(-1.0)
    assert s["q_waited"] == pytest.approx(0.5)
    assert s["q_work"] == pytest.approx(1.0)
    assert s["g_start"] == pytest.approx(-0.8)
    assert s["g_early_share"] == pytest.approx(0.75)
    assert s["g_after_q"] == pytest.approx(8.5)
    assert s["g_tail"] == pytest.approx(0.1, abs=0.011)


def test_records_that_do_not_split_into_launches_are_refused():
    q, _ = chain(3, 8, 16)
    with pytest.raises(RuntimeError):
        per_launch(q[:-1], 3)
