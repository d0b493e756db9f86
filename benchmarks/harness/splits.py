"""Data sets and splits as ``lmve-train`` makes them, for the benchmarks that measure its default run
(``benchmarks.primary``, ``benchmarks.shape_survey``): the same loading and grouping, and the test part cut in
two so that a choice made on one half is measured on the other; and the grouped study of
``benchmarks.train_speed`` and ``benchmarks.gp_search`` as a CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.common import cache_dir, write_text


def default_dataset(name: str, seed: int):
    """The data set as ``lmve-train --dataset NAME`` loads it (grouped by position when most rows repeat one)."""
    from training.data.datasets import load_dataset, survey_groups

    return survey_groups(load_dataset(name, seed=seed))


def halves(split, groups, seed: int):
    """``split`` with its test part cut in two (whole groups when ``groups``): ``selection`` and ``test``."""
    from training.pipeline import Split

    rng = np.random.default_rng([seed, 2])
    units = split.test if groups is None else np.unique(groups[split.test])
    chosen = rng.permutation(units)[: len(units) // 2]
    pick = np.isin(split.test if groups is None else groups[split.test], chosen)
    return Split(train=split.train, calibration=split.calibration, test=split.test[~pick],
                 selection=split.test[pick], adjustment=split.adjustment)


def visits_csv() -> Path:
    """The grouped study as a CSV (written once): 28 subjects of 70 to 145 visits, 7 features that matter and 13
    that do not, targets ``measure_a`` and ``measure_b``, group column ``subject``."""
    path = cache_dir("train_speed") / "visits.csv"
    if not path.is_file():
        import pandas as pd

        from training.data.synthetic import make_visits

        X, Y, subject, names, targets = make_visits(28, 70, 145, seed=0, extra_features=13)
        df = pd.DataFrame(X, columns=names).assign(**{t: Y[:, i] for i, t in enumerate(targets)},
                                                   subject=[f"s{s:02d}" for s in subject])
        write_text(path, df.to_csv(index=False))
    return path
