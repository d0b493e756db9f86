"""training/pipeline/meter.py: wall time and peak resident memory per stage."""

import time

import numpy as np

from training.pipeline.meter import StageMeter, peak_rss_mib


def test_each_stage_has_its_own_peak_and_time():
    meter = StageMeter()
    with meter.stage("big"):
        a = np.ones(50_000_000)  # 381 MiB, touched
        del a
    with meter.stage("small"):
        time.sleep(0.05)
    big, small = meter.stages["big"], meter.stages["small"]
    assert meter.peak_kind == "stage"  # Linux resets the high-water mark (/proc/self/clear_refs)
    assert big["peak_rss_mib"] - small["peak_rss_mib"] > 300
    assert small["seconds"] >= 0.05 and list(meter.stages) == ["big", "small"]
    assert small["peak_rss_mib"] <= peak_rss_mib() + 1


def test_a_repeated_stage_adds_its_seconds_and_keeps_the_larger_peak():
    meter = StageMeter()
    with meter.stage("s"):
        b = np.ones(20_000_000)
        del b
    first = dict(meter.stages["s"])
    with meter.stage("s"):
        time.sleep(0.02)
    assert meter.stages["s"]["seconds"] >= first["seconds"] + 0.02 - 0.001  # each sum rounded to 1 ms
    assert meter.stages["s"]["peak_rss_mib"] == first["peak_rss_mib"]


def test_a_stage_that_raises_is_still_recorded():
    meter = StageMeter()
    try:
        with meter.stage("fails"):
            raise ValueError("boom")
    except ValueError:
        pass
    assert "fails" in meter.stages
