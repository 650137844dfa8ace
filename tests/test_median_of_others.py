"""excess.median_of_others (re-exported by stragglers): each rank's peers' median per step from the sorted rows, exactly what masking the
rank out and taking np.nanmedian gives (it replaced that steps x ranks x ranks stack)."""
from __future__ import annotations

import numpy as np

from analyzer.cross_rank.stragglers import median_of_others


def _masked(v: np.ndarray) -> np.ndarray:
    n = v.shape[1]
    stack = np.repeat(v[:, None, :], n, axis=1)
    stack[:, np.arange(n), np.arange(n)] = np.nan
    return np.nanmedian(stack, axis=2)


def test_median_of_others_is_the_masked_median_bit_for_bit():
    rng = np.random.default_rng(3)
    for n in range(2, 34):
        for ties in (False, True):
            v = rng.normal(size=(5, n)) * 1e6
            if ties:  # equal values on several ranks (integer ns, a clean job)
                v = np.round(v / 4e5) * 4e5
            assert np.array_equal(median_of_others(v), _masked(v)), (n, ties)


def test_median_of_others_by_hand():
    v = np.array([[1.0, 2.0, 3.0, 10.0]])
    assert median_of_others(v).tolist() == [[3.0, 3.0, 2.0, 2.0]]
    assert median_of_others(np.array([[5.0, 7.0]])).tolist() == [[7.0, 5.0]]
