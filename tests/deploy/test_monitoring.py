"""The coverage alert rules and the state volume of the compose file, checked statically, and the
rules unit-tested with promtool where it is installed (``.ci/run`` installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"


def test_alert_rules_name_the_metrics_the_service_exports():
    rules = yaml.safe_load((PROM / "lmve-alerts.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert set(alerts) == {"LmveCoverageBelowTarget", "LmveServedCoverageBelowTarget", "LmveQueriesShifted"}
    shift = alerts.pop("LmveQueriesShifted")
    assert shift["expr"].strip() == "lmve_shift_alarm == 1" and "lmve-recalibrate" in shift["annotations"]["description"]
    from service.shift import ShiftCollector

    assert "lmve_shift_alarm" in {f.name for f in ShiftCollector.families().values()}
    for rule in alerts.values():
        assert {"expr", "for", "labels", "annotations"} <= set(rule)
        assert "lmve_coverage_target" in rule["expr"] and "lmve_observed_rows" in rule["expr"]
        assert "sqrt" in rule["expr"]  # the binomial margin
    assert "lmve_observed_coverage" in alerts["LmveCoverageBelowTarget"]["expr"]
    assert "lmve_observed_served_coverage" in alerts["LmveServedCoverageBelowTarget"]["expr"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (the YAML is checked above)")
def test_promtool_checks_and_unit_tests_the_rules(tmp_path):
    check = subprocess.run(["promtool", "check", "rules", str(PROM / "lmve-alerts.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(["promtool", "test", "rules", "lmve-alerts.test.yml"], cwd=PROM, capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    # the compose Prometheus config, with its rule path pointed at the file here
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    config["rule_files"] = [str(PROM / "lmve-alerts.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    conf = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                          text=True)
    assert conf.returncode == 0, conf.stdout + conf.stderr


def test_compose_gives_the_api_a_writable_state_and_prometheus_the_rules():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    env = services["api"]["environment"]  # one API: SQLite on its writable state volume
    assert env["LMVE_STATE_URL"].startswith("sqlite:////state/") and env["LMVE_RECALIBRATED_DIR"].startswith("/state/")
    state = [v for v in services["api"]["volumes"] if v["target"] == "/state"]
    assert state and not state[0].get("read_only", False)
    assert services["api"]["volumes"][1]["source"] == "state" and "state" in compose["volumes"]
    prom = services["prometheus"]
    assert prom["profiles"] == ["monitoring"]
    targets = {Path(v["source"]).name: v["target"] for v in prom["volumes"]}
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert targets["lmve-alerts.yml"] in config["rule_files"]
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["api:8000"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "/state" in dockerfile and "chown lmve:lmve /bundles /state" in dockerfile
