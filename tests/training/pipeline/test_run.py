"""training/pipeline/run.py: the plan and the stages' results are frozen records; no stage writes another's."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from tests.training.calibration.test_cross_fit import survey
from training.calibration import modes
from training.pipeline import TrainConfig, run
from training.pipeline.centre import centre_stage
from training.pipeline.meter import StageMeter
from training.pipeline.stages import methods_stage, plan, preprocess_stage


def _records(module) -> list[type]:
    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__]


@pytest.mark.parametrize("module", [run, modes], ids=["run", "modes"])
def test_every_record_is_declared_frozen(module):
    """What carries a run between stages (and what a calibration mode returns) is declared frozen, so no stage
    can assign another stage's field; the one mutable state the stages shared is gone."""
    records = _records(module)
    assert records, f"no dataclass in {module.__name__}"
    assert not hasattr(run, "TrainState")
    for cls in records:
        assert cls.__dataclass_params__.frozen, f"{cls.__name__} is not frozen"
    tree = ast.parse(inspect.getsource(module))
    for node in ast.walk(tree):  # and none is made mutable by a decorator written another way
        if isinstance(node, ast.ClassDef):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Name) and dec.id == "dataclass":
                    pytest.fail(f"{node.name}: a bare @dataclass is mutable")


def test_a_runs_plan_and_results_refuse_assignment():
    """On a real run's plan and stage results, every field refuses assignment."""
    p, meter = plan(survey(30), TrainConfig(centre="knn", methods=("ball",), fallbacks=False, seed=0)), StageMeter()
    x = preprocess_stage(p, meter)
    c = centre_stage(p, x, meter)
    fitted = methods_stage(p, x, c, meter)
    assert isinstance(p, run.Plan) and isinstance(c, run.Centres) and set(fitted.fitted) == {"ball"}
    for record in (p, x, c, fitted, p.mode):
        for f in dataclasses.fields(record):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(record, f.name, None)
    # the stages return new values: the plan's folds are the plan's, the centre stage's its own
    assert p.k == p.config.resolved_cross_fit(True, p.n_units) and c.k >= 2
