"""``agentctl import`` of archives agentd did not write, as an attacker would make them:
each is refused with a typed error before anything is imported, the daemon's memory stays
bounded whatever a member unpacks to, and it answers everyone else while an import runs.

The attack run's figures: a 1 MB archive whose ``context.json`` unpacked to 1 GiB took the
daemon to 2.8 GB and stalled it 13.9 s before it was refused; 1 GiB of blank lines was
imported; names with a terminal escape, empty, with a newline or another agent's id were
accepted; duplicate message ids and messages of another conversation were accepted
(recall then found each twice); memory holding a nested repository was imported.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.home import socket_path
from shared.ids import new_id
from shared.models.messages import Message
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.processes import AgentdProcess, final_answer, run_agentctl
from tests.support.waiting import ceiling, wait_for

GIB = 1024**3
Replacement = bytes | Callable[[bytes], bytes]


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, made as they are read (the test never holds them)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def _rewrite(
    valid: Path,
    out: Path,
    replace: dict[str, Replacement] | None = None,
    zeros: tuple[str, int] | None = None,
) -> Path:
    """``valid`` with the members named in ``replace`` given new data (or data made from
    the old), and ``zeros``' member holding that many zero bytes instead."""
    replace = replace or {}
    with (
        tarfile.open(valid, "r:gz") as source,
        tarfile.open(out, "w:gz", compresslevel=1) as target,
    ):
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isreg() else None  # type: ignore[union-attr]
            if zeros is not None and member.name == zeros[0]:
                member.size = zeros[1]
                target.addfile(member, io.BufferedReader(_Zeros(zeros[1]), 1 << 20))
                continue
            if member.name in replace and data is not None:
                new = replace[member.name]
                data = new(data) if callable(new) else new
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def _ada(call: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """An agent with two conversations of a few messages each."""
    call("agent.create", {"name": "ada"})
    call("chat", {"agent": "ada", "text": "the database port is 5432"})
    second = call("conversation.create", {"agent": "ada"})["id"]
    call("chat", {"agent": "ada", "conversation": second, "text": "the host is db1"})
    return call("agent.show", {"agent": "ada"})


def _export(file: Path) -> Path:
    done = run_agentctl("export", "--agent", "ada", "-o", str(file))
    assert done.returncode == 0, done.stderr
    return file


def _import(file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_agentctl("import", str(file), *args)


def _agents(home: Path) -> list[str]:
    return sorted(p.name for p in Layout(home).agents_dir.iterdir())


def _refused(
    home: Path, done: subprocess.CompletedProcess[str], code: str, before: list[str]
) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"{code}: "), done.stderr
    assert _agents(home) == before, "something was imported"
    assert list(Layout(home).staging_dir.iterdir()) == [], "staging was left behind"


def daemon_result(home: Path, op: str, params: dict[str, Any]) -> dict[str, Any]:
    return _call(home)(op, params)


def _hwm_bytes(pid: int) -> int:
    """The process's peak resident memory so far (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def _call(home: Path) -> Callable[..., dict[str, Any]]:
    def call(op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = final_answer(socket_path(home), op, params, timeout_s=60)
        assert answer is not None and answer["ok"], answer
        result: dict[str, Any] = answer["result"]
        return result

    return call


@pytest.mark.slow
def test_a_member_that_unpacks_to_a_gibibyte_is_refused_from_its_header_in_bounded_memory(
    agentd_home: Path, tmp_path: Path
) -> None:
    daemon = AgentdProcess().start()
    try:
        ada = _ada(_call(agentd_home))
        context = f"conversations/{ada['default_conversation_id']}/context.json"
        bomb = _rewrite(
            _export(tmp_path / "ada.tar.gz"), tmp_path / "bomb.tar.gz", zeros=(context, GIB)
        )
        assert bomb.stat().st_size < 8 * 1024**2
        before = _agents(agentd_home)
        assert daemon.proc is not None
        peak_before = _hwm_bytes(daemon.proc.pid)

        refused = _import(bomb, "--name", "bomb")

        peak_after = _hwm_bytes(daemon.proc.pid)
    finally:
        daemon.stop()

    assert peak_after - peak_before < 128 * 1024**2, "the daemon read the member into memory"
    _refused(agentd_home, refused, "invalid_archive", before)
    assert "context.json" in refused.stderr and "at most" in refused.stderr


@pytest.mark.slow
def test_an_archive_being_imported_does_not_keep_the_daemon_from_answering(
    agentd_home: Path, tmp_path: Path
) -> None:
    """A large history (a legitimate one) takes seconds to check: ``status`` is answered
    meanwhile, and the daemon's peak memory does not grow with the log: it grows by less
    than the log's own size (about 7 MiB for a 13 MiB log of 50,000 messages), which a
    daemon that held the log, even as bytes, would exceed."""
    daemon = AgentdProcess().start()
    try:
        call = _call(agentd_home)
        ada = _ada(call)
        conversation = ada["default_conversation_id"]
        log = f"conversations/{conversation}/messages.jsonl"

        log_bytes = 0

        def long_history(_old: bytes) -> bytes:
            nonlocal log_bytes
            lines = (
                Message.of(
                    id=new_id("msg"),
                    agent_id=ada["id"],
                    conversation_id=conversation,
                    role="user",
                    content=f"message {n} about the staging deploy and its many servers",
                ).to_line()
                for n in range(50_000)
            )
            history = b"".join(lines)
            log_bytes = len(history)
            return history

        big = _rewrite(
            _export(tmp_path / "ada.tar.gz"), tmp_path / "big.tar.gz", {log: long_history}
        )
        assert daemon.proc is not None
        peak_before = _hwm_bytes(daemon.proc.pid)
        importing = subprocess.Popen(
            [sys.executable, "-m", "agentd.client", "import", str(big), "--name", "ada2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        staging = Layout(agentd_home).staging_dir
        wait_for(lambda: any(staging.glob("import-*")), "the import to start", timeout_s=120)
        answered = 0
        while importing.poll() is None and any(staging.glob("import-*")):
            started = time.monotonic()
            call("status")
            answered += 1
            assert time.monotonic() - started < 30, "status waited on the import"
        out, err = importing.communicate(timeout=ceiling(300))
        peak_after = _hwm_bytes(daemon.proc.pid)
        listed = call("messages.list", {"agent": "ada2", "limit": 1, "order": "desc"})
    finally:
        daemon.stop()

    assert importing.returncode == 0, err
    assert out.startswith("imported agent ada2 (")
    assert answered >= 1, "no request was answered while the import ran"
    assert listed["messages"][0]["content"].startswith("message 49999 ")
    assert log_bytes > 12 * 1024**2
    assert peak_after - peak_before < log_bytes


@pytest.fixture
def ada_archive(daemon: DaemonRunner, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    daemon.start(memory_file_max_bytes=64 * 1024, memory_max_bytes=256 * 1024)
    ada = _ada(daemon.result)
    return ada, _export(tmp_path / "ada.tar.gz")


@pytest.mark.slow
def test_blank_lines_overlong_lines_and_a_log_without_its_last_newline_are_refused_at_once(
    ada_archive: tuple[dict[str, Any], Path], agentd_home: Path, tmp_path: Path
) -> None:
    ada, valid = ada_archive
    log = f"conversations/{ada['default_conversation_id']}/messages.jsonl"
    before = _agents(agentd_home)
    cases = {
        "blank": (lambda old: old + b"\n" * (256 * 1024**2), "is blank"),
        "spaces": (lambda old: old + b"   \n", "is blank"),
        "unterminated": (lambda old: old.removesuffix(b"\n"), "does not end with a newline"),
    }
    for what, (change, said) in cases.items():
        bad = _rewrite(valid, tmp_path / f"{what}.tar.gz", {log: change})

        refused = _import(bad, "--name", "mallory")

        _refused(agentd_home, refused, "invalid_archive", before)
        assert said in refused.stderr, (what, refused.stderr)


def test_a_tar_header_record_too_large_to_hold_is_refused_before_it_is_read(
    ada_archive: tuple[dict[str, Any], Path], agentd_home: Path, tmp_path: Path
) -> None:
    """tar reads a long name or a pax record into memory whole: 32 MiB of it is refused."""
    _, valid = ada_archive
    bad = tmp_path / "pax.tar.gz"
    with (
        tarfile.open(valid, "r:gz") as source,
        tarfile.open(bad, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as target,
    ):
        for member in source.getmembers():
            if member.name == "manifest.json":
                member.pax_headers = {"comment": "x" * (32 * 1024**2)}
            target.addfile(member, source.extractfile(member) if member.isreg() else None)
    before = _agents(agentd_home)

    refused = _import(bad, "--name", "mallory")

    _refused(agentd_home, refused, "invalid_archive", before)
    assert "tar header record" in refused.stderr


@pytest.mark.slow
def test_a_name_agent_create_would_refuse_is_refused_and_never_printed(
    ada_archive: tuple[dict[str, Any], Path], agentd_home: Path, tmp_path: Path
) -> None:
    _, valid = ada_archive

    def named(name: str) -> Callable[[bytes], bytes]:
        return lambda old: json.dumps({**json.loads(old), "name": name}).encode()

    before = _agents(agentd_home)
    for number, name in enumerate(["evil\x1b]0;PWNED\x07", "", "a\nb", "x" * 65]):
        bad = _rewrite(valid, tmp_path / f"name-{number}.tar.gz", {"agent.json": named(name)})
        for args in ((), ("--name", "mallory")):
            refused = _import(bad, *args)

            _refused(agentd_home, refused, "invalid_archive", before)
            assert "\x1b" not in refused.stderr and "\x07" not in refused.stderr

    other = daemon_result(agentd_home, "agent.create", {"name": "other"})
    taken = _rewrite(valid, tmp_path / "other-id.tar.gz", {"agent.json": named(other["id"])})
    before = _agents(agentd_home)
    _refused(agentd_home, _import(taken), "name_taken", before)
    _refused(agentd_home, _import(valid, "--name", other["id"]), "name_taken", before)
    assert "\x1b" not in run_agentctl("agents", "list").stdout


def test_agent_create_refuses_a_name_that_is_another_agents_id(daemon: DaemonRunner) -> None:
    daemon.start()
    first = daemon.result("agent.create", {"name": "first"})

    refused = daemon.call("agent.create", {"name": first["id"]})[-1]

    assert refused["error"]["code"] == "name_taken"
    assert [a["name"] for a in daemon.result("agent.list")["agents"]] == ["first"]


def test_duplicate_message_ids_and_messages_of_another_conversation_are_refused(
    ada_archive: tuple[dict[str, Any], Path], agentd_home: Path, tmp_path: Path
) -> None:
    ada, valid = ada_archive
    first = ada["default_conversation_id"]
    with tarfile.open(valid, "r:gz") as tar:
        [second] = {
            name.split("/")[1]
            for name in tar.getnames()
            if name.startswith("conversations/") and first not in name and name.count("/") == 2
        }
        second_log = tar.extractfile(f"conversations/{second}/messages.jsonl").read()  # type: ignore[union-attr]
    log = f"conversations/{first}/messages.jsonl"
    cases = {
        "twice in one log": ({log: lambda old: old + old.splitlines(keepends=True)[0]}, "twice"),
        "another conversation's": ({log: lambda old: old + second_log}, "of conversation"),
        "copied into another log": (
            {f"conversations/{second}/messages.jsonl": lambda old: old + old},
            "twice",
        ),
    }
    before = _agents(agentd_home)
    for what, (replace, said) in cases.items():
        bad = _rewrite(valid, tmp_path / f"{what}.tar.gz", replace)

        refused = _import(bad, "--name", "mallory")

        _refused(agentd_home, refused, "invalid_archive", before)
        assert said in refused.stderr, (what, refused.stderr)


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], input=stdin, capture_output=True, check=True
    ).stdout.decode()


def _bundle_with(repo: Path, valid: Path, plant: Callable[[Path], None]) -> tuple[bytes, str]:
    """The archive's memory with one more commit, which ``plant`` makes: a bundle, its head."""
    with tarfile.open(valid, "r:gz") as tar:
        bundle = tar.extractfile("memory.bundle").read()  # type: ignore[union-attr]
    repo.parent.mkdir()
    source = repo.parent / "in.bundle"
    source.write_bytes(bundle)
    subprocess.run(["git", "clone", "-q", "-b", "main", str(source), str(repo)], check=True)
    _git(repo, "config", "user.name", "mallory")
    _git(repo, "config", "user.email", "mallory@example.com")
    plant(repo)
    _git(repo, "bundle", "create", "-q", str(repo.parent / "out.bundle"), "main")
    return (repo.parent / "out.bundle").read_bytes(), _git(repo, "rev-parse", "HEAD").strip()


def _with_memory(valid: Path, out: Path, bundle: bytes, head: str) -> Path:
    def manifest(old: bytes) -> bytes:
        return json.dumps({**json.loads(old), "memory_head": head}).encode()

    return _rewrite(valid, out, {"memory.bundle": bundle, "manifest.json": manifest})


def _gitlink(repo: Path) -> None:
    sha = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{sha},notes/sub")
    _git(repo, "commit", "-q", "-m", "a gitlink")


def _dot_git_dir(repo: Path) -> None:
    """A commit whose tree holds ``notes/.git/config``, made from trees (git's index
    refuses such a path)."""
    blob = _git(repo, "hash-object", "-w", "--stdin", stdin=b"[core]\n\tfsmonitor = sh x\n")
    config = _git(repo, "mktree", stdin=f"100644 blob {blob.strip()}\tconfig\n".encode())
    notes = _git(repo, "mktree", stdin=f"040000 tree {config.strip()}\t.git\n".encode())
    root = _git(repo, "ls-tree", "HEAD") + f"040000 tree {notes.strip()}\tnotes\n"
    tree = _git(repo, "mktree", stdin=root.encode()).strip()
    commit = _git(repo, "commit-tree", tree, "-p", "HEAD", "-m", "a nested repository").strip()
    _git(repo, "update-ref", "refs/heads/main", commit)


def _files(sizes: list[int]) -> Callable[[Path], None]:
    def plant(repo: Path) -> None:
        (repo / "notes").mkdir(exist_ok=True)
        for number, size in enumerate(sizes):
            (repo / "notes" / f"part-{number}.md").write_text("x" * size)
        _git(repo, "add", "notes")
        _git(repo, "commit", "-q", "-m", "big notes")

    return plant


@pytest.mark.slow
def test_memory_that_breaks_the_content_rules_is_refused_with_its_typed_error(
    ada_archive: tuple[dict[str, Any], Path], agentd_home: Path, tmp_path: Path
) -> None:
    """The daemon's limits here: 64 KiB a file, 256 KiB in all."""
    _, valid = ada_archive
    cases = {
        "gitlink": (_gitlink, "nested_repository", "notes/sub"),
        ".git directory": (_dot_git_dir, "nested_repository", "notes/.git"),
        "file too large": (_files([100_000]), "memory_too_large", "notes/part-0.md"),
        "memory too large": (_files([40_000] * 8), "memory_too_large", "262,144"),
    }
    before = _agents(agentd_home)
    for number, (what, (change, code, said)) in enumerate(cases.items()):
        bundle, head = _bundle_with(tmp_path / f"repo-{number}" / "memory", valid, change)
        bad = _with_memory(valid, tmp_path / f"memory-{number}.tar.gz", bundle, head)

        refused = _import(bad, "--name", "mallory")

        _refused(agentd_home, refused, code, before)
        assert said in refused.stderr, (what, refused.stderr)
