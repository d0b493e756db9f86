"""Service settings that reach past the routes: the fingerprint search's threads, OpenTelemetry."""

import pytest
from pydantic import ValidationError

from models.centres import search
from models.exceptions import InputError
from service.app import create_app
from service.settings import ServiceSettings
from tests.service.conftest import features


@pytest.fixture
def restore_threads(monkeypatch):
    monkeypatch.setattr(search, "SEARCH_THREADS", search.SEARCH_THREADS)
    monkeypatch.setattr(search, "_pool", None)


def test_search_threads_come_from_the_settings_or_the_cores_per_worker(restore_threads, monkeypatch):
    monkeypatch.setattr(search.os, "cpu_count", lambda: 8)
    create_app(ServiceSettings(search_threads=3))
    assert search.SEARCH_THREADS == 3
    create_app(ServiceSettings(workers=4))
    assert search.SEARCH_THREADS == 2  # 8 cores among 4 workers
    create_app(ServiceSettings(workers=16))
    assert search.SEARCH_THREADS == 1
    create_app(ServiceSettings())
    assert search.SEARCH_THREADS == 4  # at most 4


def test_bad_search_threads_are_refused_naming_the_field(restore_threads, monkeypatch):
    monkeypatch.setenv("LMVE_SEARCH_THREADS", "0")
    with pytest.raises(ValidationError, match="search_threads"):
        ServiceSettings()
    with pytest.raises(InputError) as info:
        search.set_search_threads(0)
    assert info.value.field == "search_threads" and info.value.received == "0"


def test_otel_turns_fastapi_native_tracing_on_and_leaves_it_off_by_default(make_client, test_rows):
    import inspect

    from fastapi import FastAPI

    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        pytest.skip("this FastAPI has no native OpenTelemetry")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the process's global provider, which FastAPI uses
    body = {"features": features(test_rows[0][:1])}
    assert make_client().post("/predict-region", json=body).status_code == 200
    assert exporter.get_finished_spans() == ()  # off by default, although a provider is configured
    assert make_client(otel=True).post("/predict-region", json=body).status_code == 200
    names = [s.name for s in exporter.get_finished_spans()]
    assert any("/predict-region" in n for n in names), names


def test_serve_refuses_a_bundle_and_a_repository_together(monkeypatch, tmp_path, capsys):
    from service import cli

    monkeypatch.setenv("LMVE_BUNDLE", str(tmp_path))
    monkeypatch.setenv("LMVE_MODEL_REPOSITORY", str(tmp_path))
    assert cli.main([]) == 2
    assert "not both" in capsys.readouterr().err
    monkeypatch.delenv("LMVE_MODEL_REPOSITORY")
    with pytest.raises(SystemExit):  # both as flags: argparse's error, exit 2
        cli.main(["--bundle", str(tmp_path), f"--model-repository={tmp_path}"])
    assert "not both" in capsys.readouterr().err
