"""Where the model under a radio decision is built (``service.radio_builds``): a child process gives the model the
thread would, to the bit, with the server's own shapes; a bundle on disk that is not the one served is built
in the thread instead, and said."""

import logging
import os

import numpy as np
import pytest

from models.bundle import load_bundle
from models.radio import RadioView
from service import radio_builds
from service.radio_builds import RadioBuilder
from tests.radio_site import LATER, REPLACED, saved_site, walk


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    path = saved_site(tmp_path_factory.mktemp("radio-builds"))
    return path, load_bundle(path)


def answers(model, X):
    a = model.predict_region(X)
    return a.regions.centers, a.regions.volume("lebesgue"), a.typicality_scores


@pytest.fixture
def any_size(monkeypatch):
    """Every map built in a child, however small (the site's is)."""
    monkeypatch.setattr(radio_builds, "PROCESS_CELLS", 0)


def test_the_child_builds_what_the_thread_builds(site, any_size):
    path, model = site
    view = RadioView(gone=REPLACED, new=LATER)
    version = model.manifest["bundle_id"]
    bare = RadioBuilder("process")._in_child(model, view, path, version)
    assert bare is not None and set(bare) == set(model.methods)  # built there ...
    for name, reg in bare.items():  # ... and given the server's own shapes
        assert reg.shape_ is model.methods[name].shape_ and reg.centre_ is not model.methods[name].centre_
    X, _ = walk(20, seed=4, replaced=REPLACED)
    child = RadioBuilder("process").build(model, view, path, version)
    thread = RadioBuilder("thread").build(model, view, path, version)
    for got, want in zip(answers(child, X), answers(thread, X)):
        np.testing.assert_array_equal(got, want)
    assert child.view == view


def test_a_bundle_on_disk_that_is_not_the_served_one_is_built_in_the_thread(site, any_size, caplog):
    path, model = site
    view = RadioView(gone=REPLACED)
    with caplog.at_level(logging.WARNING, logger="lmve.service"):
        out = RadioBuilder("process").build(model, view, path, "another-bundle")
    assert "not the served another-bundle" in caplog.text and "building it in this worker" in caplog.text
    X, _ = walk(10, seed=5, replaced=REPLACED)
    for got, want in zip(answers(out, X), answers(model.adapted(view), X)):
        np.testing.assert_array_equal(got, want)


def test_no_child_for_a_decision_that_refits_nothing_or_a_small_map(site, monkeypatch):
    path, model = site
    monkeypatch.setattr(RadioBuilder, "_in_child", lambda *a: pytest.fail("a child was started"))
    view = RadioView(new=LATER, offsets={"*": 3.0})  # nothing gone: the rows are read under the view only
    out = RadioBuilder("process").build(model, view, path, model.manifest["bundle_id"])
    assert out.methods is model.methods and out.view == view
    assert model.radio_map.features.size < radio_builds.PROCESS_CELLS  # the site's map: the thread builds it
    out = RadioBuilder("process").build(model, RadioView(gone=REPLACED), path, model.manifest["bundle_id"])
    assert out.methods is not model.methods


def test_a_decision_that_differs_only_in_its_offsets_reuses_the_build(site, any_size):
    path, model = site
    version = model.manifest["bundle_id"]
    builder = RadioBuilder("process")
    first = builder.build(model, RadioView(gone=REPLACED, new=LATER, offsets={"*": 1.6}), path, version)
    view = RadioView(gone=REPLACED, new=LATER, offsets={"*": 2.4})
    again = builder.build(model, view, path, version, last=first)
    assert again.methods is first.methods and again.view == view
    X, _ = walk(20, seed=6, replaced=REPLACED)
    for got, want in zip(answers(again, X), answers(RadioBuilder("thread").build(model, view, path, version), X)):
        np.testing.assert_array_equal(got, want)  # the offset of the new view, applied to the queries
    other = builder.build(model, RadioView(gone=REPLACED[:-1], offsets={"*": 2.4}), path, version, last=again)
    assert other.methods is not first.methods  # another gone set: built again
    fresh = builder.build(model, view, path, version)
    assert fresh.methods is not first.methods  # no model served before it: built, nothing kept by the builder


def test_close_kills_a_child_still_building_and_builds_nothing_after(site, any_size):
    import threading
    import time

    path, model = site
    builder = RadioBuilder("process")
    got = {}
    worker = threading.Thread(target=lambda: got.update(out=builder.build(model, RadioView(gone=REPLACED), path,
                                                                          model.manifest["bundle_id"])))
    worker.start()
    deadline = time.monotonic() + 60
    while builder._child is None and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    child = builder._child
    assert child is not None  # started, still importing (seconds): nothing built yet
    while os.sched_getscheduler(child.pid) != os.SCHED_IDLE and time.monotonic() < deadline:
        time.sleep(0.001)
    assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE  # only the CPU time the requests leave
    builder.close()
    worker.join(60)
    assert not worker.is_alive() and not child.is_alive()
    assert got["out"] is model  # the model as trained: no build in the thread at shutdown
    assert builder.build(model, RadioView(gone=REPLACED), path, model.manifest["bundle_id"]) is model
