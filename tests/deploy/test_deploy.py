"""Deployment: Dockerfile and docker-compose checked statically (no Docker engine here), and the
compose topology (one-shot trainer -> read-only bundle -> API replicas -> nginx) run as real
processes on loopback."""

from __future__ import annotations

import hashlib
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.processes import spawn, stop
from tests.e2e.servers import free_port, start_server, wait_alive

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_trainer_then_read_only_api(compose):
    services = compose["services"]
    assert {"trainer", "api", "api-pool", "proxy"} <= set(services)
    trainer = services["trainer"]
    assert trainer["command"][0] == "lmve-train" and trainer["restart"] == "no"
    assert "synthetic" in " ".join(trainer["command"])  # the default needs no data
    for name in ("api", "api-pool"):
        api = services[name]
        assert api["depends_on"]["trainer"]["condition"] == "service_completed_successfully"
        mounts = [v for v in api["volumes"] if v["target"] == "/bundles"]
        assert mounts and mounts[0]["read_only"] is True and mounts[0]["source"] == "bundles"
        assert api["read_only"] is True
        assert api["environment"]["LMVE_BUNDLE"].startswith("/bundles/run")
    # the API serves what the trainer writes: --out /bundles/run -> /bundles/run/bundle
    out = trainer["command"][trainer["command"].index("--out") + 1]
    assert services["api"]["environment"]["LMVE_BUNDLE"] == f"{out}/bundle"
    assert services["api-pool"]["profiles"] == ["scaled"] and services["api-pool"]["deploy"]["replicas"] >= 2
    proxy = services["proxy"]
    assert proxy["profiles"] == ["scaled"]
    assert proxy["depends_on"]["api-pool"]["condition"] == "service_healthy"
    conf_src = Path(proxy["volumes"][0]["source"])
    conf = (ROOT / conf_src).read_text()
    assert "server api-pool:8000" in conf  # the proxy points at the replica service
    assert "bundles" in compose["volumes"]


def _stages(text: str) -> dict[str, str]:
    """Dockerfile stage name -> its instructions."""
    parts = re.split(r"^FROM\s+", text, flags=re.M)[1:]
    out = {}
    for part in parts:
        head = part.splitlines()[0]
        m = re.search(r"\s+AS\s+([\w-]+)", head)
        out[m.group(1) if m else head] = part
    return out


def test_dockerfile_api_image_has_no_torch_trainer_has_cpu_torch():
    text = (ROOT / "Dockerfile").read_text()
    stages = _stages(text)
    assert {"build-api", "build-trainer", "trainer", "api"} <= set(stages)
    # the API image copies the environment of a stage that never installs torch, and checks that
    assert "COPY --from=build-api /opt/venv" in stages["api"]
    assert "torch" not in stages["build-api"].replace("find_spec('torch')", "")
    assert "find_spec('torch') is not None" in stages["build-api"]
    # the base install and the postgres extra (a fleet's shared state), nothing heavier
    assert 'pip install -c constraints.txt ".[postgres]"' in stages["build-api"]
    # the trainer: CPU torch pinned from the CPU index, then the train extra
    assert re.search(r"torch==2\.13\.0", stages["build-trainer"]) and "whl/cpu" in stages["build-trainer"]
    assert '".[train]"' in stages["build-trainer"] and "COPY --from=build-trainer /opt/venv" in stages["trainer"]
    for name in ("api", "trainer"):
        user = re.findall(r"^USER\s+(\S+)", stages[name], flags=re.M)
        assert user and not user[-1].startswith(("root", "0")), name
    assert re.search(r"^HEALTHCHECK .*readyz", stages["api"], flags=re.M | re.S)
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.M):
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which does not exist"
    assert re.search(r'^CMD \["lmve-serve"\]', stages["api"], flags=re.M)
    assert list(stages)[-1] == "api"  # `docker build .` builds the API image
    assert (ROOT / ".dockerignore").is_file()


def test_compose_scaled_fleet_shares_one_postgres_state_and_one_bundle_store(compose):
    """The scaled profile: PostgreSQL (official image, named volume, health check), three replicas on it that
    start once it is healthy, one writable bundle store every replica mounts, and the Dockerfile's image
    owning that mount point (a named volume copies it, so the non-root user can write)."""
    from service.settings import ServiceSettings

    services = compose["services"]
    pg, pool = services["postgres"], services["api-pool"]
    assert pg["profiles"] == ["scaled"] and pg["image"].startswith("postgres:")
    assert {v["target"]: v["source"] for v in pg["volumes"]}["/var/lib/postgresql/data"] in compose["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    env = pool["environment"]
    url = env["LMVE_STATE_URL"].replace("${LMVE_PG_PASSWORD:-lmve}", pg["environment"]["POSTGRES_PASSWORD"]
                                        .split(":-")[-1].rstrip("}"))
    assert url == (f"postgresql://{pg['environment']['POSTGRES_USER']}:lmve@postgres:5432/"
                   f"{pg['environment']['POSTGRES_DB']}")
    assert ServiceSettings(state_url=url).state_url == url  # the service accepts it
    assert "LMVE_STATE_DB" not in env  # no per-replica SQLite left behind
    assert pool["depends_on"]["postgres"]["condition"] == "service_healthy"
    store = [v for v in pool["volumes"] if v["target"] == "/store"]
    assert store and store[0]["source"] in compose["volumes"] and not store[0].get("read_only", False)
    assert env["LMVE_RECALIBRATED_DIR"].startswith("/store/")
    runtime = _stages((ROOT / "Dockerfile").read_text())["runtime-base"]
    assert re.search(r"mkdir -p [^&]*/store[^&]*&& chown lmve:lmve [^\n]*/store", runtime)


def test_compose_builds_each_service_from_its_image(compose):
    services = compose["services"]
    assert services["trainer"]["build"]["target"] == "trainer"
    for name in ("api", "api-pool"):
        assert services[name]["build"]["target"] == "api"
    stages = _stages((ROOT / "Dockerfile").read_text())
    assert {services[n]["build"]["target"] for n in ("trainer", "api")} <= set(stages)


def _tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(p.name.encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def start_nginx(root: Path, site: str, workers: int = 1) -> subprocess.Popen:
    """nginx in the foreground with the ``server`` blocks ``site`` (written to ``root/site.conf``), its pid,
    logs and temporary files under ``root``, in a process group of its own (:func:`tests.processes.spawn`)."""
    (root / "site.conf").write_text(site)
    (root / "nginx.conf").write_text(
        f"daemon off; pid {root}/nginx.pid; error_log {root}/nginx.err warn; worker_processes {workers};\n"
        f"events {{ worker_connections 256; }}\n"
        f"http {{ access_log off; client_body_temp_path {root}/cb; proxy_temp_path {root}/pt;\n"
        f"  fastcgi_temp_path {root}/ft; uwsgi_temp_path {root}/ut; scgi_temp_path {root}/st;\n"
        f"  include {root}/site.conf; }}\n")
    return spawn(["nginx", "-c", str(root / "nginx.conf"), "-p", str(root)], stderr=open(root / "nginx.log", "wb"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (.ci/run installs nginx-light)")
def test_compose_topology_on_loopback(tmp_path):
    # 1. the one-shot trainer (the real CLI, as the compose command runs it)
    bundles = tmp_path / "bundles"
    train = subprocess.run([str(Path(sys.executable).parent / "lmve-train"), "--dataset", "synthetic", "--out",
                            str(bundles / "run"), "--quiet", "--n-samples", "600", "--lmve-max-steps", "60"],
                           capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr
    bundle = bundles / "run" / "bundle"
    before = _tree_digest(bundle)
    # 2. two API replicas reading the same bundle
    procs, ports = [], []
    try:
        for i in range(2):
            port = free_port()
            procs.append(start_server(bundle, port, tmp_path / f"api{i}.log"))
            ports.append(port)
        for p, proc in zip(ports, procs):
            wait_alive(f"http://127.0.0.1:{p}", proc)
        # 3. nginx with the compose proxy config, upstream pointed at the replicas
        conf = (ROOT / "deploy/nginx/lmve.conf").read_text()
        servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=2 fail_timeout=5s;" for p in ports)
        conf = re.sub(r"^\s*server api-pool:8000[^;]*;", servers, conf, flags=re.M)
        proxy_port = free_port()
        conf = conf.replace("listen 8080;", f"listen 127.0.0.1:{proxy_port};")
        nginx = start_nginx(tmp_path, conf)
        procs.append(nginx)
        base = f"http://127.0.0.1:{proxy_port}"
        wait_alive(base, nginx, 20.0, path="/readyz")
        h = {"X-API-Key": "e2e-key"}
        row = {"features": [[-65.0] * 16], "points": [[20.0, 12.0]]}
        for _ in range(20):
            assert httpx.post(f"{base}/contains", json=row, headers=h, timeout=10).status_code == 200
        served = []
        for p in ports:
            text = httpx.get(f"http://127.0.0.1:{p}/metrics").text
            m = re.search(r'lmve_http_requests_total\{method="POST",model="[^"]*",route="/contains",status="200"\} (\d+)', text)
            served.append(int(float(m.group(1))) if m else 0)
        assert sum(served) == 20 and min(served) > 0, served  # both replicas took traffic
        # one replica dies: the proxy routes around it
        procs[0].send_signal(signal.SIGTERM)
        procs[0].wait(timeout=30)
        for _ in range(10):
            assert httpx.post(f"{base}/contains", json=row, headers=h, timeout=10).status_code == 200
    finally:
        for proc in procs:
            stop(proc)
    assert _tree_digest(bundle) == before  # the API never writes to the bundle
