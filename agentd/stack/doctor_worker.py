"""``agentd doctor --worker``: is this host ready to run reflection workers?

A worker host needs no home, so none of the home's checks apply. What it needs is checked
instead: git; Redis at ``AGENTD_REDIS_URL`` reachable with its password (and TLS, for
``rediss://``); the worker's own directory, writable and outside any home; the model's
credentials and API as this host has them (the model is the agent's, sent with each job,
unless ``AGENTD_REFLECTION_MODEL`` names one here; ``AGENTD_MODEL`` stands for the
agents' otherwise); and the sandbox the sub-agent's shell runs in. Like ``agentd doctor``
it creates nothing and exits 0 when all is good, 1 when anything needs fixing.
"""

from __future__ import annotations

import os

from agentd.stack.doctor import check_git
from agentd.stack.doctor_findings import Finding
from agentd.stack.doctor_service import ModelSetup, model_findings
from agentd.stack.worker_cli import worker_problem
from shared.coordination.broker import locate
from shared.logging import configure
from shared.settings import Settings


def check_worker_redis(settings: Settings) -> Finding:
    problem = worker_problem(settings)
    if problem is not None:
        return Finding(False, "redis", problem[1], "fix AGENTD_REDIS_URL or AGENTD_WORKER_DIR")
    location = locate(settings)
    tls = ", over TLS" if location.celery_ssl is not None else ""
    if location.embedded:
        return Finding(True, "redis", f"the embedded Valkey of this host answers{tls}")
    return Finding(True, "redis", f"answers with the password given{tls}")


def check_worker_dir(settings: Settings) -> Finding:
    directory = settings.worker_dir
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        return Finding(
            False,
            "worker dir",
            f"{directory} cannot be made or written by this user",
            "set AGENTD_WORKER_DIR to a directory this user owns",
        )
    return Finding(True, "worker dir", f"{directory} (jobs' scratch and logs)")


def check_worker_sandbox(settings: Settings) -> Finding:
    from shared import sandbox

    if sandbox.available():
        return Finding(True, "sandbox", sandbox.reason())
    if settings.unsandboxed_bash:
        return Finding(
            True, "sandbox", f"{sandbox.reason()}; the reflector's shell runs unconfined"
        )
    return Finding(
        False,
        "sandbox",
        sandbox.reason(),
        "install bubblewrap (`apt-get install bubblewrap`): without it this worker's "
        "reflections fail with sandbox_unavailable",
    )


def run_worker_doctor(settings: Settings) -> int:
    configure("agentd-doctor", level="WARNING")
    model = settings.reflection_model or settings.model
    findings = [check_git(settings), check_worker_redis(settings), check_worker_dir(settings)]
    for finding in findings:
        print(finding.line(), flush=True)
    setup = ModelSetup(
        model,
        settings.api_base,
        frozenset(os.environ),
        settings.api_key is not None,
        settings.block_remote_models,
        daemons=False,
    )
    for finding in [*model_findings(setup), check_worker_sandbox(settings)]:
        findings.append(finding)
        print(finding.line(), flush=True)
    failed = [f for f in findings if not f.ok]
    print(f"{len(findings) - len(failed)} ok, {len(failed)} to fix" if failed else "all good")
    return 1 if failed else 0
