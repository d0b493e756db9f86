"""deploy/kserve/inferenceservice.yaml: lmve as a KServe custom predictor (no cluster here). Checked
statically against the Dockerfile, the settings and the routes, then its container's command and
environment run as a real process on loopback and probed as KServe's probes would."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from service.app import create_app
from service.auth import PUBLIC_PATHS
from service.settings import ServiceSettings
from tests.processes import spawn, stop
from tests.e2e.servers import free_port, wait_alive

ROOT = Path(__file__).resolve().parents[2]
KSERVE_MOUNT = "/mnt/models"  # where KServe's storage initializer puts STORAGE_URI's contents


@pytest.fixture(scope="module")
def service():
    return yaml.safe_load((ROOT / "deploy/kserve/inferenceservice.yaml").read_text())


def _container(service) -> dict:
    containers = service["spec"]["predictor"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(container) -> dict:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_inference_service_matches_the_image_settings_and_routes(service):
    assert (service["apiVersion"], service["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    c = _container(service)
    assert c["name"] == "kserve-container"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert c["image"] == compose["x-api"]["image"]  # the Dockerfile's api target, as compose tags it
    dockerfile = (ROOT / "Dockerfile").read_text()
    api_stage = re.split(r"^FROM\s+", dockerfile, flags=re.M)[-1]
    assert api_stage.startswith("runtime-base AS api")
    assert f"USER {c['securityContext']['runAsUser']}:" in api_stage
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'{c["command"][0]} = "service.cli:main"' in pyproject
    env = _env(c)
    settings = set(ServiceSettings.model_fields)
    for name in env:
        if name.startswith("LMVE_"):
            assert name[5:].lower() in settings, f"{name} is not a setting of lmve-serve"
    assert env["LMVE_MODEL_REPOSITORY"] == KSERVE_MOUNT and env["STORAGE_URI"]
    port = int(env["LMVE_PORT"])
    assert [p["containerPort"] for p in c["ports"]] == [port]
    routes = set(create_app(ServiceSettings()).openapi()["paths"])
    for probe in ("readinessProbe", "livenessProbe"):
        path = c[probe]["httpGet"]["path"]
        assert c[probe]["httpGet"]["port"] == port and path in routes and path in PUBLIC_PATHS, probe
    assert int(env["LMVE_MAX_CONCURRENCY"]) == service["spec"]["predictor"]["containerConcurrency"]
    # a read-only root: whatever the service writes lies on a mounted volume
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"] for v in service["spec"]["predictor"]["volumes"]}
    assert {m["name"] for m in c["volumeMounts"]} <= volumes and "/tmp" in mounts
    for name in ("LMVE_STATE_DB", "LMVE_RECALIBRATED_DIR"):
        assert any(env[name].startswith(m + "/") for m in mounts), name
    key = next(e for e in c["env"] if e["name"] == "LMVE_API_KEY")
    assert "secretKeyRef" in key["valueFrom"]  # never a literal key in the manifest


@pytest.mark.slow
def test_the_container_runs_as_kserve_runs_it(service, bundle_dir, tmp_path):
    """The container's command with its environment (the mount, the state volume and the port moved
    under tmp_path, the secret given), probed on its readiness and liveness paths, then a V2 call."""
    import os
    import subprocess

    c = _container(service)
    repo = tmp_path / "mnt-models"
    repo.mkdir()
    (repo / "site").symlink_to(bundle_dir, target_is_directory=True)
    port = free_port()
    env = {k: v for k, v in _env(c).items() if v is not None and k.startswith("LMVE_")}
    env = {k: v.replace(KSERVE_MOUNT, str(repo)).replace("/state", str(tmp_path / "state")) for k, v in env.items()}
    (tmp_path / "state").mkdir()
    assert env["LMVE_GRPC_PORT"] == "0"  # Knative routes one port: this service's is REST
    env.update(LMVE_PORT=str(port), LMVE_HOST="127.0.0.1", LMVE_API_KEY="kserve-key")
    full = {k: v for k, v in os.environ.items() if not k.startswith("LMVE_")} | env
    proc = spawn([str(Path(sys.executable).parent / c["command"][0]), *c["command"][1:]], env=full,
                            stdout=open(tmp_path / "server.log", "wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc, 90.0, path=c["readinessProbe"]["httpGet"]["path"])
        assert httpx.get(base + c["livenessProbe"]["httpGet"]["path"]).json() == {"live": True}
        meta = httpx.get(f"{base}/v2/models/site", headers={"X-API-Key": "kserve-key"}).json()
        d = meta["inputs"][0]["shape"][1]
        r = httpx.post(f"{base}/v2/models/site/infer", headers={"X-API-Key": "kserve-key"},
                       json={"inputs": [{"name": "features", "shape": [1, d], "datatype": "FP64", "data": [-60.0] * d}]})
        assert r.status_code == 200 and [o["name"] for o in r.json()["outputs"]] == ["center", "shape", "volume",
                                                                                    "typicality"]
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def grpc_service():
    return yaml.safe_load((ROOT / "deploy/kserve/inferenceservice-grpc.yaml").read_text())


def test_the_grpc_service_is_the_rest_one_on_its_h2c_port(service, grpc_service):
    """The same predictor (image, command, volumes, key) with gRPC on the one port Knative routes (named h2c),
    probed there."""
    rest, grpc = _container(service), _container(grpc_service)
    assert grpc_service["metadata"]["name"] != service["metadata"]["name"]
    for key in ("image", "command", "securityContext", "volumeMounts", "resources"):
        assert grpc[key] == rest[key], key
    env = _env(grpc)
    assert {k: v for k, v in env.items() if k != "LMVE_GRPC_PORT"} == {k: v for k, v in _env(rest).items()
                                                                       if k != "LMVE_GRPC_PORT"}
    grpc_port = int(env["LMVE_GRPC_PORT"])
    assert grpc["ports"] == [{"name": "h2c", "containerPort": grpc_port, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert grpc[probe]["tcpSocket"]["port"] == grpc_port, probe


@pytest.mark.slow
def test_the_grpc_container_answers_tritonclient(grpc_service, bundle_dir, tmp_path):
    """The gRPC manifest's command and environment as a real process (ports moved to free ones): its probe port
    opens, and tritonclient's gRPC client gets readiness and an inference through it."""
    import os
    import socket
    import subprocess

    import numpy as np
    import tritonclient.grpc as tg

    c = _container(grpc_service)
    repo = tmp_path / "mnt-models"
    repo.mkdir()
    (repo / "site").symlink_to(bundle_dir, target_is_directory=True)
    (tmp_path / "state").mkdir()
    port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in _env(c).items() if v is not None and k.startswith("LMVE_")}
    env = {k: v.replace(KSERVE_MOUNT, str(repo)).replace("/state", str(tmp_path / "state")) for k, v in env.items()}
    env.update(LMVE_PORT=str(port), LMVE_GRPC_PORT=str(grpc_port), LMVE_HOST="127.0.0.1", LMVE_API_KEY="kserve-key")
    full = {k: v for k, v in os.environ.items() if not k.startswith("LMVE_")} | env
    proc = spawn([str(Path(sys.executable).parent / c["command"][0]), *c["command"][1:]], env=full,
                 stdout=open(tmp_path / "server.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_alive(f"http://127.0.0.1:{port}", proc, 90.0, path="/v2/health/ready")
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=5):  # the tcpSocket probe
            pass
        client = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        assert client.is_server_ready() and client.is_model_ready("site", headers={"x-api-key": "kserve-key"})
        d = client.get_model_metadata("site", headers={"x-api-key": "kserve-key"}).inputs[0].shape[1]
        features = tg.InferInput("features", [1, d], "FP64")
        features.set_data_from_numpy(np.full((1, d), -60.0))
        result = client.infer("site", [features], headers={"x-api-key": "kserve-key"})
        assert result.as_numpy("volume").shape == (1,) and result.as_numpy("volume")[0] > 0
    finally:
        stop(proc)
