"""Every git the project runs goes through the one inert helper, :mod:`shared.memory.git`.

The helper is where git is made inert (hardened options, pinned config and attributes, a
clean environment); a git started anywhere else would obey whatever a model planted. So
no module of ``agentd/``, ``reflector/`` or ``shared/`` but the helper may start a process
whose command names git, and none may use GitPython to run git (its config parser, which
reads a file in Python, is the one use allowed). Read from the source, so a new call site
fails this test before it ever runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("agentd", "reflector", "shared")
HELPER = Path("shared/memory/git.py")
SPAWNERS = re.compile(
    r"^(subprocess\.(run|Popen|call|check_call|check_output|getoutput|getstatusoutput)"
    r"|os\.(system|popen|exec\w*|spawn\w*|posix_spawnp?)"
    r"|asyncio\.create_subprocess_(exec|shell)|.*\.subprocess_(exec|shell)|pty\.spawn)$"
)
"""What starts a process, by the dotted name it is called with."""
NAMES_GIT = re.compile(r"(^|/)git(\.exe)?$|^git\s")
"""A string naming the git program: ``git``, ``/usr/bin/git``, a shell line ``git …``."""
GITPYTHON_ALLOWED = {"git.config.GitConfigParser"}
"""Reads a config file in Python; starts no git."""


def violations(source: str, where: str) -> list[str]:
    """Each git started outside the helper, and each use of GitPython, in ``source``."""
    tree = ast.parse(source)
    found = [f"{where}:{line}: {what}" for line, what in _gitpython(tree)]
    for function in [tree, *ast.walk(tree)]:
        if not isinstance(function, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        assigned = _assignments(function)
        for call in _own_nodes(function):
            if not isinstance(call, ast.Call) or not SPAWNERS.match(_dotted(call.func)):
                continue
            strings = _strings([*call.args, *(k.value for k in call.keywords)], assigned)
            if any(NAMES_GIT.search(text) for text in strings):
                found.append(f"{where}:{call.lineno}: {_dotted(call.func)} starts git")
    return found


def _gitpython(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "git" or alias.name.startswith("git."):
                    found.append((node.lineno, f"imports GitPython ({alias.name})"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_gitpython(node.module):
            for alias in node.names:
                if f"{node.module}.{alias.name}" not in GITPYTHON_ALLOWED:
                    found.append((node.lineno, f"imports {alias.name} from GitPython"))
    return found


def _is_gitpython(module: str | None) -> bool:
    return module is not None and (module == "git" or module.startswith("git."))


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions nested in it (each is its own scope)."""
    nodes: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        nodes.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return nodes


def _assignments(scope: ast.AST) -> dict[str, list[ast.expr]]:
    """What each name is assigned in ``scope``: ``path = shutil.which("git")`` then
    ``subprocess.run([path, …])`` starts git too."""
    assigned: dict[str, list[ast.expr]] = {}
    for node in _own_nodes(scope):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                assigned.setdefault(target.id, []).append(value)
    return assigned


def _strings(nodes: list[ast.expr], assigned: dict[str, list[ast.expr]]) -> list[str]:
    """Every string constant in ``nodes``, following names to what they were assigned."""
    found: list[str] = []
    seen: set[str] = set()
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.Name) and node.id not in seen:
            seen.add(node.id)
            todo.extend(assigned.get(node.id, []))
        todo.extend(ast.iter_child_nodes(node))
    return found


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    return "?"


@pytest.mark.slow
def test_no_module_but_the_helper_starts_git_or_uses_gitpython() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative != HELPER:
                found += violations(path.read_text(), str(relative))
    assert not found, "\n".join(found)


def test_the_helper_itself_is_seen_starting_git() -> None:
    """The control: the scan finds the one place that does start git."""
    assert violations((ROOT / HELPER).read_text(), str(HELPER))


@pytest.mark.parametrize(
    "source",
    [
        # agentd doctor's check before issue 21: the program came from a variable.
        'import shutil, subprocess\ndef check():\n    path = shutil.which("git")\n'
        '    return subprocess.run([path, "--version"], capture_output=True)\n',
        'import subprocess\nsubprocess.run(["git", "-C", "/m", "status"])\n',
        'import subprocess\nsubprocess.check_output("git status --porcelain", shell=True)\n',
        'import os\nos.system("git add -A")\n',
        "import asyncio\nasync def f():\n"
        '    await asyncio.create_subprocess_exec("/usr/bin/git", "log")\n',
        "from git import Repo\nRepo('.').git.status()\n",
        "import git\ngit.Git('.').execute(['git', 'status'])\n",
    ],
)
def test_a_git_started_elsewhere_is_found(source: str) -> None:
    assert violations(source, "planted.py")


@pytest.mark.parametrize(
    "source",
    [
        "from shared.memory import git\ngit.run(path, 'status')\n",
        'import subprocess\nsubprocess.run(["bwrap", "--ro-bind", "/usr", "/usr", "bash"])\n',
        "from git.config import GitConfigParser\n",
        'import shutil\npath = shutil.which("git")\n',
    ],
)
def test_the_helper_and_other_programs_pass(source: str) -> None:
    assert not violations(source, "fine.py")
