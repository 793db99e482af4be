"""``agentd doctor``: check the setup and say how to fix each problem.

Each check returns a :class:`Finding`; the command prints one line per finding. It exits
0 when every check passed and 1 when any found something to fix (a daemon that is not
running included); invalid settings exit 2 before any check. Checks never call a model
(a model's credentials are checked, and its API is asked for any answer at all).

The local checks read the home and this machine; the service's (``doctor_service``) ask
the running daemon for the settings it runs with. Doctor creates nothing, not even the
home: a check that would need to write (is the home writable?) asks the system instead,
git's status leaves even ``.git/index`` as it was, and no git runs in a memory repo whose
``.git/config`` or attributes are not agentd's (git would put them back first:
:mod:`agentd.stack.doctor_memory` reports them, ``--fix`` restores them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from agentd.daemon.effective_config import redact_url
from agentd.stack.doctor_findings import Finding
from agentd.stack.doctor_logs import check_conversation_logs
from agentd.stack.doctor_memory import check_memory_sizes, check_memory_walls, fix_memory_walls
from agentd.stack.doctor_service import service_findings
from shared.coordination.broker import locate
from shared.coordination.embedded import ping, server_binary
from shared.errors import AgentdError, MemoryDamaged, MemoryRepoError, RedisUnavailable
from shared.logging import configure
from shared.memory import git
from shared.memory.hand_edits import commit_command, files_named
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import scan_conversations
from shared.store.layout import AgentFiles
from shared.store.permissions import find_loose, repair


def check_git(_settings: Settings) -> Finding:
    if shutil.which("git") is None:
        return Finding(False, "git", "not found", "install git (e.g. `apt-get install git`)")
    try:
        return Finding(True, "git", git.version())
    except MemoryRepoError as exc:
        return Finding(False, "git", exc.message, "install git (e.g. `apt-get install git`)")


def check_home(settings: Settings) -> Finding:
    """Writable, or creatable by agentd's first start: asked of the system, not tried."""
    home = settings.home
    fix = "set AGENTD_HOME to a directory you own, or fix its permissions"
    if home.exists():
        if not home.is_dir():
            return Finding(False, "data directory", f"{home} is not a directory", fix)
        if not os.access(home, os.W_OK | os.X_OK):
            return Finding(False, "data directory", f"{home} is not writable", fix)
        return Finding(True, "data directory", f"{home} (writable)")
    parent = next(p for p in home.absolute().parents if p.exists())
    if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
        return Finding(
            False, "data directory", f"{home} cannot be created: {parent} is not writable", fix
        )
    return Finding(True, "data directory", f"{home} (not there yet: agentd creates it)")


EXAMPLES = 3
"""How many loose paths a finding names; the count says how many there are."""


def check_permissions(settings: Settings) -> Finding:
    """Group or other bits anywhere under the home: memory, transcripts, keys, logs."""
    if not settings.home.exists():
        return Finding(True, "permissions", "nothing to check yet (no data directory)")
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
    from agentd.daemon.agents import open_memory

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


def check_uncommitted_memory(settings: Settings) -> Finding:
    """Memory files edited in a checkout and left uncommitted: reflection waits on them."""
    from shared.memory.repo import MemoryRepo

    dirty: list[tuple[str, list[str]]] = []
    for record in AgentStore(settings.layout).scan().records:
        memory = settings.layout.memory_dir(record.id)
        with contextlib.suppress(AgentdError):  # a damaged repo is the memory repos finding
            if git.pin_problems(memory):
                continue  # git would first restore .git: the git walls finding says so
            files = MemoryRepo(memory).uncommitted()
            if files:
                dirty.append((record.name, files))
    if not dirty:
        return Finding(True, "memory edits", "every memory checkout is committed")
    named = "; ".join(f"{name}: {files_named(files)}" for name, files in dirty)
    commands = " and ".join(f"`{commit_command(name)}`" for name, _files in dirty)
    return Finding(
        False,
        "memory edits",
        f"uncommitted (the agent does not see them, and reflection waits): {named}",
        f"commit them with {commands}, or discard them",
    )


def check_core_memory(settings: Settings) -> Finding:
    """Agents whose memory lost a core file (deleted by hand, or merged before destructive
    reflections were held), and the reflections held for the user (nothing to fix: a note)."""
    from shared.memory.compile import HUMAN_PATH, PERSONA_PATH
    from shared.memory.destructive import system_files
    from shared.memory.proposals import held_proposals
    from shared.memory.repo import MemoryRepo

    missing: list[tuple[str, list[str]]] = []
    waiting: list[str] = []
    for record in AgentStore(settings.layout).scan().records:
        with contextlib.suppress(AgentdError):  # a damaged repo is the memory repos finding
            repo = MemoryRepo(settings.layout.memory_dir(record.id))  # refuses a non-repo
            if git.pin_problems(repo.path):
                continue  # git would first restore .git: the git walls finding says so
            files = system_files(repo.path, "HEAD")
            gone = [path for path in (PERSONA_PATH, HUMAN_PATH) if path not in files]
            if gone:
                missing.append((record.name, gone))
        held = held_proposals(settings.layout.reflection_files(record.id).proposals)
        if held:
            waiting.append(
                f"{len(held)} reflection(s) held for {record.name} "
                f"(`agentctl memory proposals --agent {record.name}`)"
            )
    if missing:
        named = "; ".join(f"{name}: {', '.join(paths)}" for name, paths in missing)
        name = missing[0][0]
        return Finding(
            False,
            "core memory",
            f"missing, so the agent's prompt lacks them: {named}",
            f"find the commit that removed them with `agentctl memory log --agent {name}` and "
            f"undo it with `agentctl memory revert COMMIT --agent {name}`, or write them again "
            f"with `agentctl memory edit system/human.md --agent {name}`",
        )
    present = f"every agent has {PERSONA_PATH} and {HUMAN_PATH}"
    return Finding(True, "core memory", "; ".join([present, *waiting]))


def check_redis(settings: Settings) -> Finding:
    location = locate(settings)
    if location.embedded:
        try:
            binary = server_binary()
        except RedisUnavailable as exc:
            return Finding(False, "redis", "no embedded Valkey binary", exc.message)
        running = location.socket_path is not None and ping(
            location.socket_path, timeout_s=location.timeout_s, password=settings.redis_password
        )
        state = "running" if running else "not running (started by `agentd up`)"
        return Finding(True, "redis", f"embedded Valkey {binary.name}, {state}")
    try:
        location.client().ping()
    except Exception as exc:  # any failure to reach it is the finding
        return Finding(
            False,
            "redis",
            f"{redact_url(location.redis_url)} is not reachable ({exc})",
            "start that Redis, fix AGENTD_REDIS_URL, or unset it to use the embedded Valkey",
        )
    return Finding(True, "redis", f"{redact_url(location.redis_url)} reachable")


def check_sandbox(settings: Settings) -> Finding:
    from shared import sandbox

    if sandbox.available():
        agents = settings.layout.agents_dir
        if not agents.is_dir():
            return Finding(True, "sandbox", sandbox.reason())
        # Confined either way; whether the model can read where the home is, too.
        return Finding(
            True, "sandbox", f"{sandbox.reason()}; {sandbox.hides_host_paths(agents)[1]}"
        )
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


CHECKS: list[Callable[[Settings], Finding]] = [
    check_git,
    check_home,
    check_permissions,
    check_state_files,
    check_conversation_logs,
    check_memory_repos,
    check_memory_walls,
    check_uncommitted_memory,
    check_core_memory,
    check_memory_sizes,
    check_sandbox,
    check_agent_bash,
]
"""The local checks; the service's follow (:func:`agentd.stack.doctor_service.service_findings`)."""


def run_doctor(settings: Settings, *, fix: bool = False) -> int:
    """Print each finding; with ``fix``, first repair what can be repaired for sure."""
    configure("agentd-doctor", level="WARNING")  # findings go to stdout, log lines to stderr
    if fix:
        print("\n".join(fix_permissions(settings) + fix_memory_walls(settings)))
    findings: list[Finding] = []
    for check in CHECKS:
        findings.append(check(settings))
        print(findings[-1].line(), flush=True)
    for finding in service_findings(settings, lambda: check_redis(settings)):
        findings.append(finding)
        print(finding.line(), flush=True)
    failed = [f for f in findings if not f.ok]
    print(f"{len(findings) - len(failed)} ok, {len(failed)} to fix" if failed else "all good")
    return 1 if failed else 0
