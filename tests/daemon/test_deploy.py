"""What ships for running agentd other than with ``agentd up``: the Procfile (with honcho
as a declared optional dependency) and the systemd units of ``deploy/``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling, wait_for
from tests.support.workers import RedisForTests

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNIT_SUFFIXES = (".service", ".target")
REFERENCES = re.compile(r"^(?:PartOf|WantedBy|RequiredBy|Requires|Wants|BindsTo)=(.*)$", re.M)


def _units() -> list[Path]:
    return sorted(p for p in DEPLOY.iterdir() if p.name.endswith(UNIT_SUFFIXES))


def test_honcho_is_declared_for_the_procfile_and_in_the_dev_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra in ("procfile", "dev"):
        assert any(re.match(r"honcho\b", requirement) for requirement in extras[extra]), extra


def test_every_agentd_unit_the_units_refer_to_ships_in_deploy() -> None:
    shipped = {unit.name for unit in _units()}
    referred = {
        name
        for unit in _units()
        for line in REFERENCES.findall(unit.read_text())
        for name in line.split()
        if name.startswith("agentd")
    }
    templates = {re.sub(r"@[^.]+\.", "@.", name) for name in referred}
    assert "agentd.target" in referred
    assert templates <= shipped


def test_every_service_that_runs_a_models_shell_lets_bubblewrap_make_its_namespaces() -> None:
    """The agent's bash (the daemon) and the reflector's (the workers) run only in
    bubblewrap, which needs user and mount namespaces: ``RestrictNamespaces=true`` would
    leave the agent without bash and every reflection ``sandbox_unavailable``."""
    services = [unit for unit in _units() if unit.name.endswith(".service")]
    assert {unit.name for unit in services} >= {"agentd.service", "agentd-reflector@.service"}
    for unit in services:
        settings = re.findall(r"^RestrictNamespaces=(.*)$", unit.read_text(), re.M)
        assert settings == ["false"], (unit.name, settings)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_finds_nothing_wrong_in_the_units(tmp_path: Path) -> None:
    for unit in _units():
        shutil.copy(unit, tmp_path)
    names = [u.name.replace("@.", "@1.") for u in _units()]
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(f"./{name}" for name in names)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )
    complaints = [
        line
        for line in (verified.stdout + verified.stderr).splitlines()
        if not re.search(r"Command /opt/agentd/\S+ is not executable", line)  # not installed
    ]
    assert complaints == []


@pytest.mark.slow
def test_honcho_runs_the_procfile_with_each_worker_named_after_its_process(
    agentd_home: Path,
) -> None:
    redis = RedisForTests(agentd_home).start()
    venv = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{venv}{os.pathsep}{os.environ['PATH']}",
        "AGENTD_REDIS_URL": f"unix://{redis.server.socket_path}?db=0",
    }
    honcho_start = ["-f", str(ROOT / "Procfile"), "-d", str(ROOT), "start", "-c", "reflector=2"]
    with open(agentd_home / "honcho.out", "wb") as output:
        honcho = subprocess.Popen(
            [sys.executable, "-m", "honcho", *honcho_start],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def both_workers() -> list[dict[str, Any]]:
            status = run_agentctl("status", "--json", env=env)
            workers = json.loads(status.stdout)["redis"]["workers"] if not status.returncode else []
            return workers if len(workers) == 2 else []

        workers = wait_for(both_workers, "status to list both workers", timeout_s=60, poll_s=0.5)
        assert sorted(w["name"].split("@")[0] for w in workers) == ["reflector.1", "reflector.2"]
    finally:
        os.killpg(honcho.pid, signal.SIGTERM)
        honcho.wait(ceiling(60))
        redis.stop()
