"""Interval algebra: hand-built cases with known answers, and random sets against a brute-force bitmap."""
import numpy as np
import pytest

from analyzer.rank import intervals as iv


def arr(*pairs):
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def as_list(x):
    return list(zip(x[0].tolist(), x[1].tolist()))


def test_union_merges_overlapping_touching_and_nested():
    u = iv.union(*arr((5, 10), (0, 3), (3, 4), (8, 12), (20, 25), (21, 22), (30, 30)))
    assert as_list(u) == [(0, 4), (5, 12), (20, 25)]


def test_intersection_and_difference_exact():
    a = iv.union(*arr((0, 10), (20, 30)))
    b = iv.union(*arr((5, 25)))
    assert as_list(iv.intersect(a, b)) == [(5, 10), (20, 25)]
    assert as_list(iv.difference(a, b)) == [(0, 5), (25, 30)]
    assert as_list(iv.difference(b, a)) == [(10, 20)]
    assert as_list(iv.intersect(a, iv.empty())) == []
    assert as_list(iv.difference(a, iv.empty())) == as_list(a)


def test_half_open_touching_sets_do_not_intersect():
    a = iv.union(*arr((0, 5)))
    b = iv.union(*arr((5, 9)))
    assert iv.total(iv.intersect(a, b)) == 0
    assert as_list(iv.difference(a, b)) == [(0, 5)]


def test_clip_and_clipped_lengths():
    s = iv.union(*arr((0, 10), (20, 30), (40, 50)))
    assert as_list(iv.clip(s, 5, 45)) == [(5, 10), (20, 30), (40, 45)]
    got = iv.clipped_lengths(s, np.array([0, 5, 10, 25, 60, -5]), np.array([50, 45, 20, 42, 70, 0]))
    assert got.tolist() == [30, 20, 0, 7, 0, 0]


def _bitmap(starts, ends, n):
    m = np.zeros(n, bool)
    for s, e in zip(starts, ends):
        if e > s:
            m[s:e] = True
    return m


def _runs(m):
    d = np.diff(np.r_[0, m.astype(int), 0])
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


@pytest.mark.parametrize("seed", range(25))
def test_random_sets_match_bitmap(seed):
    rng = np.random.default_rng(seed)
    n = 400
    def rand_set(k):
        s = rng.integers(0, n - 1, k)
        return s, s + rng.integers(0, 40, k)
    a_raw, b_raw = rand_set(rng.integers(0, 30)), rand_set(rng.integers(0, 30))
    a, b = iv.union(*a_raw), iv.union(*b_raw)
    ma, mb = _bitmap(*a_raw, n + 50), _bitmap(*b_raw, n + 50)
    assert as_list(a) == _runs(ma)
    assert as_list(iv.intersect(a, b)) == _runs(ma & mb)
    assert as_list(iv.difference(a, b)) == _runs(ma & ~mb)
    lo = rng.integers(0, n, 10)
    hi = lo + rng.integers(0, 100, 10)
    expect = [int(ma[l:h].sum()) for l, h in zip(lo, hi)]
    assert iv.clipped_lengths(a, lo, hi).tolist() == expect
