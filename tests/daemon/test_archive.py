"""``agentctl export`` / ``agentctl import``: an agent survives the round trip whole (its
messages, its memory history commit for commit, its settings), under a new id or its
own; an archive that is not one agentd wrote is refused before the home is touched."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from agentd.archive import members as archive_members
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.processes import run_agentctl
from tests.support.waiting import ceiling

IGNORED = {"id", "name", "updated_at", "memory_dir", "effective_model", "model_is_default"}


@pytest.fixture
def ada(daemon: DaemonRunner) -> dict[str, Any]:
    """An agent with two conversations, a hand-made memory commit and its own settings."""
    daemon.start()
    daemon.result("agent.create", {"name": "ada", "model": "mock", "context_window": 9000})
    daemon.result("reflection.settings", {"agent": "ada", "trigger": "step-count", "step_count": 7})
    daemon.result("chat", {"agent": "ada", "text": "我的数据库端口是 5432"})
    second = daemon.result("conversation.create", {"agent": "ada"})["id"]
    daemon.result("chat", {"agent": "ada", "conversation": second, "text": "the host is db1"})
    blob = daemon.result("memory.read", {"agent": "ada", "path": "system/human.md"})["blob"]
    text = "---\nname: human\ndescription: the user\n---\n- port 5432\n"
    written = {"agent": "ada", "path": "system/human.md", "text": text, "base": blob}
    daemon.result("memory.write", written)
    return daemon.result("agent.show", {"agent": "ada"})


def _export(path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    with open(path, "wb") as out:
        return subprocess.run(
            [sys.executable, "-m", "agentd.client", "export", *args],
            stdout=out,
            stderr=subprocess.PIPE,
            env=dict(os.environ),
            timeout=ceiling(60),
        )


def _everything(daemon: DaemonRunner, agent: str) -> dict[str, Any]:
    """What a round trip must keep: settings, every message, the memory history."""
    shown = daemon.result("agent.show", {"agent": agent})
    conversations = {
        c["id"]: [
            {k: v for k, v in m.items() if k != "agent_id"}
            for m in daemon.result(
                "messages.list",
                {"agent": agent, "conversation": c["id"], "limit": 10_000, "order": "asc"},
            )["messages"]
        ]
        for c in daemon.result("conversation.list", {"agent": agent})["conversations"]
    }
    commits = daemon.result("memory.log", {"agent": agent, "limit": 1000})["commits"]
    return {
        "settings": {k: v for k, v in shown.items() if k not in IGNORED},
        "sleeptime": daemon.result("reflection.settings", {"agent": agent}),
        "messages": conversations,
        "memory": [(c["sha"], c["author"], c["subject"]) for c in commits],
        "files": daemon.result("memory.show", {"agent": agent})["files"],
    }


def test_an_agent_survives_export_and_import_under_a_new_id_and_its_own(
    daemon: DaemonRunner, ada: dict[str, Any], agentd_home: Path, tmp_path: Path
) -> None:
    before = _everything(daemon, "ada")
    assert len(before["messages"]) == 2 and len(before["memory"]) == 2
    file = tmp_path / "ada.tar.gz"

    exported = _export(file, "--agent", "ada")
    copy = run_agentctl("import", str(file), "--name", "ada2")

    assert exported.returncode == 0, exported.stderr
    assert copy.returncode == 0, copy.stderr
    assert copy.stdout.startswith("imported agent ada2 (agent-")
    copy_id = copy.stdout.split("(", 1)[1].split(")", 1)[0]
    assert copy_id != ada["id"]
    assert _everything(daemon, "ada2") == before
    messages = daemon.result("messages.list", {"agent": "ada2", "limit": 10})["messages"]
    assert {m["agent_id"] for m in messages} == {copy_id}
    hits = daemon.result("recall.search", {"agent": "ada2", "query": "数据库端口"})["hits"]
    assert "我的数据库端口是 5432" in [h["text"] for h in hits]

    taken = run_agentctl("import", str(file), "--keep-id")
    assert taken.returncode == 1 and taken.stderr.startswith("agent_exists: ")
    assert run_agentctl("agents", "delete", "ada", "--yes").returncode == 0
    same = run_agentctl("import", str(file), "--keep-id")

    assert same.returncode == 0, same.stderr
    assert _everything(daemon, "ada") == before
    assert daemon.result("agent.show", {"agent": "ada"})["id"] == ada["id"]
    assert list(Layout(agentd_home).staging_dir.iterdir()) == []


def test_an_export_is_never_written_to_a_terminal_and_an_import_needs_a_free_name(
    daemon: DaemonRunner, ada: dict[str, Any], tmp_path: Path
) -> None:
    file = tmp_path / "ada.tar.gz"
    assert run_agentctl("export", "--agent", "ada", "-o", str(file)).returncode == 0
    assert not Path(f"{file}.part").exists()

    clash = run_agentctl("import", str(file))

    assert clash.returncode == 1 and clash.stderr.startswith("name_taken: ")
    assert "--name" in clash.stderr
    assert [a["name"] for a in daemon.result("agent.list")["agents"]] == ["ada"]


@pytest.mark.slow
def test_an_export_written_to_a_file_is_private_to_its_user(
    daemon: DaemonRunner, ada: dict[str, Any], tmp_path: Path
) -> None:
    """It holds every transcript and the whole memory, as the 0600 files of the home do."""
    file = tmp_path / "ada.tar.gz"
    exported = subprocess.run(
        [sys.executable, "-m", "agentd.client", "export", "--agent", "ada", "-o", str(file)],
        capture_output=True,
        env=dict(os.environ),
        umask=0o022,
        timeout=ceiling(60),
    )

    assert exported.returncode == 0, exported.stderr
    assert oct(file.stat().st_mode & 0o777) == "0o600"


def _with(valid: bytes, name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x") -> bytes:
    """``valid`` with one more member (a file by default) added."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(valid), mode="r:gz") as source,
        tarfile.open(fileobj=out, mode="w:gz") as target,
    ):
        for member in source.getmembers():
            target.addfile(member, source.extractfile(member) if member.isreg() else None)
        extra = tarfile.TarInfo(name)
        extra.type = kind
        extra.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
        extra.size = len(data) if kind == tarfile.REGTYPE else 0
        target.addfile(extra, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


def _replaced(valid: bytes, name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(valid), mode="r:gz") as source,
        tarfile.open(fileobj=out, mode="w:gz") as target,
    ):
        for member in source.getmembers():
            content = source.extractfile(member) if member.isreg() else None
            if member.name == name:
                member.size, content = len(data), io.BytesIO(data)
            target.addfile(member, content)
    return out.getvalue()


@pytest.mark.slow
def test_an_archive_agentd_did_not_write_is_refused_and_changes_nothing(
    daemon: DaemonRunner,
    ada: dict[str, Any],
    agentd_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    file = tmp_path / "ada.tar.gz"
    assert _export(file, "--agent", "ada").returncode == 0
    valid = file.read_bytes()
    conversation = f"conversations/{ada['default_conversation_id']}"
    bad = {
        "parent": _with(valid, "../escaped.md"),
        "absolute": _with(valid, "/tmp/escaped.md"),
        "dotdot inside": _with(valid, f"{conversation}/../../agent.json"),
        "symlink": _with(valid, "conversations/conv-x/context.json", tarfile.SYMTYPE),
        "hard link": _with(valid, "conversations/conv-x/messages.jsonl", tarfile.LNKTYPE),
        "device": _with(valid, "conversations/conv-x/conversation.json", tarfile.CHRTYPE),
        "stranger": _with(valid, "workspace/run.sh"),
        "bad bundle": _replaced(valid, "memory.bundle", b"# v2 git bundle\nnot one\n"),
        "bad message": _replaced(valid, f"{conversation}/messages.jsonl", b'{"role":"x"}\n'),
        "not gzip": b"PK\x03\x04 a zip file",
    }
    agents_before = sorted(p.name for p in Layout(agentd_home).agents_dir.iterdir())
    monkeypatch.setattr(archive_members, "MAX_UNPACKED_BYTES", len(valid) * 2)
    bad["too big"] = _replaced(valid, f"{conversation}/messages.jsonl", b"0" * len(valid) * 2)

    refused = {}
    for what, data in bad.items():
        path = tmp_path / f"{what}.tar.gz"
        path.write_bytes(data)
        refused[what] = run_agentctl("import", str(path), "--name", "mallory")

    for what, result in refused.items():
        assert (what, result.returncode) == (what, 1)
        assert result.stderr.startswith("invalid_archive: "), (what, result.stderr)
    assert sorted(p.name for p in Layout(agentd_home).agents_dir.iterdir()) == agents_before
    assert list(Layout(agentd_home).staging_dir.iterdir()) == []
    assert not (tmp_path.parent / "escaped.md").exists() and not Path("/tmp/escaped.md").exists()
