"""``agentd doctor``: check the setup and say how to fix each problem.

Each check returns a :class:`Finding`; the command prints one line per finding and exits
1 if any failed. Checks are cheap and local: they never call a model (a configured model
is checked for its credentials, not with a paid request).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.coordination.broker import locate
from shared.coordination.embedded import RedisUnavailable, ping, server_binary
from shared.errors import MemoryDamaged
from shared.logging import configure
from shared.providers.mock import MOCK_MODEL
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import scan_conversations
from shared.store.layout import AgentFiles
from shared.store.permissions import find_loose, repair


@dataclass(frozen=True)
class Finding:
    ok: bool
    what: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "✓" if self.ok else "✗"
        text = f"{mark} {self.what}: {self.detail}"
        return text if self.ok or not self.fix else f"{text}\n    → {self.fix}"


def check_git(_settings: Settings) -> Finding:
    path = shutil.which("git")
    if path is None:
        return Finding(False, "git", "not found", "install git (e.g. `apt-get install git`)")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()
    return Finding(True, "git", version)


def check_home(settings: Settings) -> Finding:
    home = settings.home
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / ".doctor-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return Finding(
            False,
            "data directory",
            f"{home} is not writable ({exc.strerror})",
            "set AGENTD_HOME to a directory you own, or fix its permissions",
        )
    return Finding(True, "data directory", f"{home} (writable)")


EXAMPLES = 3
"""How many loose paths a finding names; the count says how many there are."""


def check_permissions(settings: Settings) -> Finding:
    """Group or other bits anywhere under the home: memory, transcripts, keys, logs."""
    loose = find_loose(settings.home)
    if not loose:
        return Finding(True, "permissions", "private (directories 0700, files 0600)")
    examples = ", ".join(entry.describe(settings.home) for entry in loose[:EXAMPLES])
    more = ", …" if len(loose) > EXAMPLES else ""
    return Finding(
        False,
        "permissions",
        f"{len(loose)} path(s) under {settings.home} are open to other users: {examples}{more}",
        "run `agentd doctor --fix` (chmod go-rwx on each; symbolic links are not followed)",
    )


def fix_permissions(settings: Settings) -> list[str]:
    """``agentd doctor --fix``: what :func:`repair` did, one line each."""
    result = repair(settings.home)
    lines = [f"fixed permissions of {result.fixed} path(s) under {settings.home}"]
    lines += [f"  left {loose.describe(settings.home)}: {why}" for loose, why in result.left]
    return lines


def check_state_files(settings: Settings) -> Finding:
    layout = settings.layout
    agents = AgentStore(layout).scan()
    damaged = [f"{error.path} (corrupt)" for error in agents.corrupt]
    damaged += [
        f"{AgentFiles(Path(error.path)).record} (missing; its data is there)"
        for error in agents.missing
    ]
    for record in agents.records:
        conversations = scan_conversations(layout, record.id)
        damaged += [f"{error.path} (corrupt)" for error in conversations.damaged]
    if damaged:
        return Finding(
            False,
            "state files",
            f"damaged: {'; '.join(damaged)}",
            "agentd refuses to guess what they held and serves everything else. Restore "
            "them from a backup; for a missing agent record, `agentctl chat` on that agent "
            "also offers a record rebuilt from the agent's data",
        )
    return Finding(True, "state files", f"{len(agents.records)} agent record(s) readable")


def check_memory_repos(settings: Settings) -> Finding:
    from agentd.agents import open_memory

    damaged: list[MemoryDamaged] = []
    records = AgentStore(settings.layout).scan().records
    for record in records:
        try:
            open_memory(record.id, settings.layout.memory_dir(record.id)).close()
        except MemoryDamaged as exc:
            damaged.append(exc)
    if damaged:
        return Finding(
            False,
            "memory repos",
            "; ".join(f"{Path(e.path).parent.name}: {e.path} ({e.reason})" for e in damaged),
            " ".join(e.fix for e in damaged[:1]),
        )
    return Finding(True, "memory repos", f"{len(records)} readable")


def check_redis(settings: Settings) -> Finding:
    location = locate(settings)
    if location.embedded:
        try:
            binary = server_binary()
        except RedisUnavailable as exc:
            return Finding(False, "redis", "no embedded Valkey binary", exc.message)
        running = location.socket_path is not None and ping(location.socket_path)
        state = "running" if running else "not running (started by `agentd up`)"
        return Finding(True, "redis", f"embedded Valkey {binary.name}, {state}")
    try:
        import redis

        redis.Redis.from_url(location.redis_url, socket_connect_timeout=1, socket_timeout=1).ping()
    except Exception as exc:  # any failure to reach it is the finding
        return Finding(
            False,
            "redis",
            f"{location.redis_url} is not reachable ({exc})",
            "start that Redis, fix AGENTD_REDIS_URL, or unset it to use the embedded Valkey",
        )
    return Finding(True, "redis", f"{location.redis_url} reachable")


def check_daemon(settings: Settings) -> Finding:
    path = settings.layout.socket_path
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        try:
            probe.connect(str(path))
        except OSError:
            return Finding(True, "daemon", "not running (start it with `agentd up`)")
    return Finding(True, "daemon", f"answering on {path}")


def check_sandbox(_settings: Settings) -> Finding:
    from shared import sandbox

    if sandbox.available():
        return Finding(True, "sandbox", sandbox.reason())
    return Finding(
        False,
        "sandbox",
        sandbox.reason(),
        "install bubblewrap (`apt-get install bubblewrap`): without it reflections fail "
        "with sandbox_unavailable, unless AGENTD_UNSANDBOXED_BASH=1 lets their shell run "
        "unconfined",
    )


def check_agent_bash(settings: Settings) -> Finding:
    from shared.agent.tools.registry import agent_shell

    shell = agent_shell(
        unsandboxed_allowed=settings.unsandboxed_bash, network=settings.tool_network
    )
    return Finding(shell.sandboxed, "agent bash", shell.detail, shell.fix)


def check_model(settings: Settings) -> Finding:
    model = settings.model
    if model == MOCK_MODEL:
        return Finding(True, "model", "mock (offline, deterministic)")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    try:
        import litellm

        litellm.suppress_debug_info = True
        report = litellm.validate_environment(model=model, api_base=settings.api_base)
    except Exception as exc:  # an unknown provider prefix, say
        return Finding(
            False,
            "model",
            f"{model}: {exc}",
            "use a litellm model string such as openai/gpt-4o or ollama/llama3.1",
        )
    missing = report.get("missing_keys") or []
    if missing and not settings.api_key:
        return Finding(
            False,
            "model",
            f"{model}: missing {', '.join(missing)}",
            f"export {missing[0]}=… (or set AGENTD_API_KEY)",
        )
    return Finding(True, "model", f"{model} (credentials present)")


CHECKS: list[Callable[[Settings], Finding]] = [
    check_git,
    check_home,
    check_permissions,
    check_state_files,
    check_memory_repos,
    check_redis,
    check_daemon,
    check_sandbox,
    check_agent_bash,
    check_model,
]


def run_doctor(settings: Settings, *, fix: bool = False) -> int:
    """Print each finding; with ``fix``, first repair what can be repaired for sure."""
    configure("agentd-doctor", level="WARNING")  # findings go to stdout, log lines to stderr
    if fix:
        print("\n".join(fix_permissions(settings)))
    findings = [check(settings) for check in CHECKS]
    for finding in findings:
        print(finding.line())
    failed = [f for f in findings if not f.ok]
    print(f"{len(findings) - len(failed)} ok, {len(failed)} to fix" if failed else "all good")
    return 1 if failed else 0
