"""Every file of agentd's is named in one place, ``shared/store/layout.py``.

Before, ``messages.jsonl``, ``log.jsonl`` or ``compaction-event.json`` were spelled in two
to six modules each, and a rename that missed one would have split the data silently.
The test reads every module's code (docstrings aside, which may name files to explain
them) and finds any string that spells one of the layout's file names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.store.layout import (
    AgentFiles,
    ConversationFiles,
    Layout,
    RecallFiles,
    ReflectionFiles,
    memory_lock,
)

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "shared/store/layout.py"


def file_names() -> set[str]:
    """The name of every file the layout knows (directories' generic names aside), which
    no other module may spell even in a pattern or a format string (tantivy names the
    files of a recall index itself)."""
    home = Layout(Path("/home"))
    paths = [
        home.config_file,
        home.embedded_redis_socket,
        home.up_lock,
        home.serve_lock,
        memory_lock(Path("/a/memory")),
    ]
    for files in (
        AgentFiles(Path("/a")),
        ConversationFiles(Path("/c")),
        ReflectionFiles(Path("/r")),
        RecallFiles(Path("/i")),
    ):
        paths += [
            getattr(files, name)
            for name, value in vars(type(files)).items()
            if isinstance(value, property)
        ]
    return {path.name for path in paths if isinstance(path, Path) and "." in path.name}


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))  # attribute docstrings
    return found


def test_the_layout_names_the_files_every_part_of_agentd_uses() -> None:
    assert {"messages.jsonl", "log.jsonl", "compaction-event.json", "agent.json"} <= file_names()
    assert "format.json" in file_names()


@pytest.mark.slow
def test_no_module_but_the_layout_spells_a_file_name() -> None:
    names = file_names()
    spelled = []
    for package in ("agentd", "reflector", "shared"):
        for path in (ROOT / package).rglob("*.py"):
            if path == LAYOUT:
                continue
            tree = ast.parse(path.read_text())
            skip = docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if id(node) in skip:
                        continue
                    hits = [name for name in names if name in node.value]
                    spelled += [f"{path.relative_to(ROOT)}:{node.lineno}: {hit}" for hit in hits]
    assert spelled == []
