"""training/pipeline/config.py: the methods a run fits, its projection and the checks made before any fit; the plan
makes each decision once, so the Python API and ``lmve-train`` fit the same thing."""

from __future__ import annotations

import pytest

from models.exceptions import InputError
from models.geo import TargetCRS
from tests.training.calibration.test_cross_fit import survey
from training.pipeline import TrainConfig, train
from training.pipeline.config import FALLBACKS, check_config
from training.pipeline.stages import plan


@pytest.mark.parametrize("methods, fallbacks, expected", [
    (("ball",), True, ("ge", "nle", "ball")),
    (("lmve", "nle"), True, ("ge", "nle", "lmve")),  # the fallbacks first, once each
    (("ball",), False, ("ball",)),
    (("nle", "ge"), False, ("nle", "ge")),  # exactly what was named, in its order
])
def test_resolved_methods_put_the_fallbacks_first_unless_off(methods, fallbacks, expected):
    assert TrainConfig(methods=methods, fallbacks=fallbacks).resolved_methods() == expected


def test_the_plan_holds_the_resolved_methods_and_a_run_fits_them():
    """``train()`` with ``methods=("ball",)`` fits the service's fallbacks too, as ``lmve-train --methods ball``
    does; ``fallbacks=False`` fits the ball alone."""
    ds = survey(24)
    assert plan(ds, TrainConfig(centre="knn", methods=("ball",))).config.methods == (*FALLBACKS, "ball")
    with_fallbacks = train(ds, TrainConfig(centre="knn", methods=("ball",), seed=0))
    assert set(with_fallbacks.model.methods) == {"ge", "nle", "ball"}
    alone = train(ds, TrainConfig(centre="knn", methods=("ball",), fallbacks=False, seed=0))
    assert set(alone.model.methods) == {"ball"}


def test_the_primary_may_be_a_fallback_only_when_it_is_fitted():
    check_config(TrainConfig(methods=("ball",), primary="nle"))  # NLE is fitted as a fallback
    with pytest.raises(InputError, match="nle") as caught:
        check_config(TrainConfig(methods=("ball",), primary="nle", fallbacks=False))
    assert caught.value.field == "primary"


def test_an_unknown_centre_candidate_is_refused_by_name():
    with pytest.raises(InputError, match="centre_candidates: unknown centre 'nope'") as caught:
        check_config(TrainConfig(centre="auto", centre_candidates=("knn", "nope")))
    assert caught.value.field == "centre_candidates" and caught.value.received == "nope"
    check_config(TrainConfig(centre="knn", centre_candidates=("nope",)))  # candidates matter only with auto


def test_target_crs_resolves_a_name_the_dataset_default_and_none():
    """A CRS named as a string is resolved against the dataset, as ``--crs`` is; ``"dataset"`` takes what the
    dataset declares; ``None`` and a :class:`TargetCRS` pass through."""
    ds = survey(24)
    assert TrainConfig(crs=None).target_crs(ds) is None
    assert TrainConfig(crs="dataset").target_crs(ds) is None  # the synthetic survey declares none
    named = TrainConfig(crs="EPSG:32630", crs_axes="yx", crs_scale=0.3048).target_crs(ds)
    assert named == TargetCRS("EPSG:32630", axes="yx", scale=0.3048)
    given = TargetCRS("EPSG:3857")
    assert TrainConfig(crs=given).target_crs(ds) is given
    assert plan(ds, TrainConfig(centre="knn", crs="EPSG:32630")).crs == TargetCRS("EPSG:32630")
    with pytest.raises(InputError, match="^crs: crs 'EPSG:4326' .* is not projected") as caught:
        plan(ds, TrainConfig(centre="knn", crs="EPSG:4326"))
    assert caught.value.field == "crs"  # the field, not a flag: the command names the flag
    with pytest.raises(InputError, match="^crs_scale: crs scale must be a positive number") as caught:
        TrainConfig(crs="EPSG:3857", crs_scale=-1.0).target_crs(ds)
    assert caught.value.field == "crs_scale" and "--" not in str(caught.value)
    with pytest.raises(InputError, match="^crs: crs_axes and crs_scale describe a CRS; name it$"):
        TrainConfig(crs="dataset", crs_axes="yx").target_crs(ds)
