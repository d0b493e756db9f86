"""What the shape tests share: a fast LMVE budget and the coverage of a fitted regressor over random
calibration splits."""

import numpy as np

#: an LMVE budget that converges on the small test sets
FAST_LMVE = dict(max_steps=600, eval_every=25, patience=6)


def coverage_over_random_splits(reg, X, Y, pool, seed: int, centers=None, m_c: int = 400, check=None) -> float:
    """Mean test coverage of ``reg`` over 200 random calibration/test splits of ``pool`` (``m_c``
    calibration rows each); ``check(region, te)`` runs on every split."""
    rng = np.random.default_rng(seed)
    cov = []
    for _ in range(200):
        p = rng.permutation(pool)
        ca, te = p[:m_c], p[m_c:]
        reg.conformalize(X[ca], Y[ca], centers=None if centers is None else centers[ca])
        region = reg.predict_region(X[te], centers=None if centers is None else centers[te])
        if check is not None:
            check(region, te)
        cov.append(region.contains(Y[te]).mean())
    return float(np.mean(cov))
