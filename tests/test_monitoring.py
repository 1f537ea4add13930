"""The shipped Prometheus alert rules are valid (`promtool check rules`) and fire on the series they
watch (`promtool test rules`, monitoring/alerts_test.yml); the Grafana dashboard is valid JSON with a
query in every panel. (tests/test_metrics.py checks that both name only metrics a worker exports.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

MONITORING = Path(__file__).resolve().parent.parent / "monitoring"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: install Debian's prometheus package (scripts/test-machine.sh does)"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, cwd=MONITORING)


def test_the_alert_rules_are_valid_for_promtool() -> None:
    """`promtool check rules` accepts every rule."""
    done = promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_alert_rules_fire_on_the_series_they_watch() -> None:
    """A handed-off task and a run of unknown write outcomes fire their alerts; completed tasks fire
    none."""
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_has_a_query_in_every_panel() -> None:
    """The dashboard parses, and each panel queries Prometheus."""
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["title"] and all(t["expr"] for t in panel["targets"]), panel
