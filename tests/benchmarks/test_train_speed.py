"""benchmarks/train_speed.py: a rerun of some scenarios keeps the recorded runs of the others."""

from __future__ import annotations

from benchmarks import train_speed
from benchmarks.common import write_rows


def _run(scenario: str, variant: str, seed: int, wall: float) -> dict:
    stages = {"load": {"seconds": 1.5, "peak_rss_mib": 400.0}, "lmve": {"seconds": 20.25, "peak_rss_mib": 900.5}}
    return {"scenario": scenario, "variant": variant, "seed": seed, "commit": "0123abc", "wall_s": wall,
            "stopped": False, "peak_mib": 900.5, "command": "-m training.commands.train --dataset synthetic --seed 0",
            "models": {"-": {"centre": "knn", "served": "lmve", "coverage": 0.91, "volume": 12.5, "folds_run": 3,
                             "stages": stages}}}


def test_the_recorded_runs_the_cache_lacks_come_back_with_their_figures(tmp_path):
    runs = [_run("synthetic", "after", 0, 27.5), _run("visits", "before", 1, 390.0),
            {"scenario": "uji_across", "variant": "before", "seed": 0, "commit": "5027930", "wall_s": 1800.1,
             "stopped": True}]
    path = tmp_path / "train_speed.csv"
    write_rows(path, train_speed.csv_rows(runs), train_speed.CSV_COLUMNS)
    back = train_speed.recorded(path, have={("synthetic", "after", 0)})  # the cache holds this one: not read back
    assert [(r["scenario"], r["variant"], r["seed"]) for r in back] == [("visits", "before", 1),
                                                                       ("uji_across", "before", 0)]
    visits, stopped = back
    assert visits["models"] == runs[1]["models"] and visits["wall_s"] == 390.0 and visits["peak_mib"] == 900.5
    assert visits["commit"] == "0123abc" and train_speed._flags(visits).startswith("--csv visits.csv --targets")
    assert stopped["stopped"] is True and stopped["wall_s"] == 1800.1 and "models" not in stopped
    # the summary reads them as it reads the cached runs
    assert "| visits |" in train_speed.summarise(back, ["--cached-only"])
    assert train_speed.recorded(tmp_path / "none.csv", set()) == []
