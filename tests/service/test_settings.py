"""Service settings that reach into the models: the fingerprint search's threads."""

import pytest
from pydantic import ValidationError

from models import neighbours
from models.exceptions import InputError
from service.app import create_app
from service.settings import ServiceSettings


@pytest.fixture
def restore_threads(monkeypatch):
    monkeypatch.setattr(neighbours, "SEARCH_THREADS", neighbours.SEARCH_THREADS)
    monkeypatch.setattr(neighbours, "_pool", None)


def test_search_threads_come_from_the_settings_or_the_cores_per_worker(restore_threads, monkeypatch):
    monkeypatch.setattr(neighbours.os, "cpu_count", lambda: 8)
    create_app(ServiceSettings(search_threads=3))
    assert neighbours.SEARCH_THREADS == 3
    create_app(ServiceSettings(workers=4))
    assert neighbours.SEARCH_THREADS == 2  # 8 cores among 4 workers
    create_app(ServiceSettings(workers=16))
    assert neighbours.SEARCH_THREADS == 1
    create_app(ServiceSettings())
    assert neighbours.SEARCH_THREADS == 4  # at most 4


def test_bad_search_threads_are_refused_naming_the_field(restore_threads, monkeypatch):
    monkeypatch.setenv("LMVE_SEARCH_THREADS", "0")
    with pytest.raises(ValidationError, match="search_threads"):
        ServiceSettings()
    with pytest.raises(InputError) as info:
        neighbours.set_search_threads(0)
    assert info.value.field == "search_threads" and info.value.received == "0"
