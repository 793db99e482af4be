"""The error tree is closed: every exception class of ``agentd``, ``reflector`` and
``shared`` derives from :class:`shared.errors.AgentdError`, is defined in
:mod:`shared.errors`, and appears in the tree its docstring draws, under its real parent.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import shared.errors as errors

ROOT = Path(__file__).resolve().parent.parent

# Run in a process of its own: importing every module has effects on the importing process
# (the reflector's app takes provider keys out of the environment, say).
_SCAN = """
import importlib, inspect, json, pathlib
found = []
for package in ("shared", "agentd", "reflector"):
    for path in sorted(pathlib.Path(package).rglob("*.py")):
        name = ".".join(path.with_suffix("").parts).removesuffix(".__init__")
        if name.endswith(".__main__"):
            continue
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found.append([name, value.__qualname__, [c.__name__ for c in value.__mro__]])
print(json.dumps(found))
"""

_TREE_LINE = re.compile(r"^(?P<prefix>(?:    |│   |├── |└── )*)(?P<name>[A-Z]\w+)")


def defined_exceptions() -> list[tuple[str, str, list[str]]]:
    """(module, class name, the names along its MRO) of every exception class the three
    packages define."""
    result = subprocess.run(
        [sys.executable, "-c", _SCAN], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [tuple(entry) for entry in json.loads(result.stdout.splitlines()[-1])]


def drawn_tree() -> dict[str, str | None]:
    """Each class the docstring draws, with the class drawn above it (None for the root)."""
    doc = errors.__doc__ or ""
    block = doc.split("::\n", 1)[1]
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            if path:
                break
            continue
        match = _TREE_LINE.match(line)
        assert match is not None, f"a line of the tree that names no class: {line!r}"
        depth = len(match["prefix"]) // 4 - 1
        del path[depth:]
        name = match["name"]
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = path[-1] if path else None
        path.append(name)
    return parents


def real_tree() -> dict[str, str | None]:
    """Each error class of :mod:`shared.errors`, with its parent in the tree."""
    tree: dict[str, str | None] = {}
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, errors.AgentdError):
            base = value.__bases__[0]
            tree[value.__name__] = None if value is errors.AgentdError else base.__name__
    return tree


def test_every_exception_class_is_an_agentd_error_defined_in_shared_errors() -> None:
    found = defined_exceptions()
    assert len(found) > 40  # the scan reached shared.errors itself
    outside = [
        f"{module}.{name}"
        for module, name, _ in found
        if module != "shared.errors" and not module.startswith("shared.errors.")
    ]
    rootless = [f"{module}.{name}" for module, name, mro in found if "AgentdError" not in mro]
    assert outside == [], "define these in shared/errors.py, in its tree"
    assert rootless == [], "derive these from AgentdError"


def test_the_drawn_tree_is_the_real_tree() -> None:
    drawn, real = drawn_tree(), real_tree()
    assert set(drawn) - set(real) == set(), "drawn, but no such error class"
    assert set(real) - set(drawn) == set(), "error classes the tree does not draw"
    misplaced = {
        name: (drawn[name], parent) for name, parent in real.items() if drawn[name] != parent
    }
    assert misplaced == {}, "drawn under one parent (first), derived from another"


def test_every_single_inheritance_keeps_the_tree_a_tree() -> None:
    """One parent each: a class deriving from two errors would be drawn under one only."""
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, errors.AgentdError):
            assert len(value.__bases__) == 1, value
