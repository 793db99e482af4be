"""Settings: environment over agentd.toml over defaults; bad values are refused by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.settings import Settings
from tests.support.bounds import bounds, is_numeric


def test_defaults_run_offline_on_the_mock_model(agentd_home: Path) -> None:
    settings = Settings()
    assert (settings.home, settings.model, settings.max_steps) == (agentd_home, "mock", 50)
    assert settings.layout.socket_path == agentd_home / "run" / "agentd.sock"


def test_the_config_file_is_read_and_the_environment_wins(
    agentd_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (agentd_home / "agentd.toml").write_text('model = "openai/gpt-4o"\ncontext_window = 8192\n')
    assert (Settings().model, Settings().context_window) == ("openai/gpt-4o", 8192)
    monkeypatch.setenv("AGENTD_MODEL", "ollama/llama3.1")
    assert Settings().model == "ollama/llama3.1"


def test_a_bad_value_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTD_CONTEXT_WINDOW", "-5")
    with pytest.raises(ValidationError, match="context_window"):
        Settings()


def test_every_numeric_setting_has_bounds() -> None:
    unbounded = [
        name
        for name, info in Settings.model_fields.items()
        if is_numeric(info) and not ({"ge", "gt"} & bounds(info) and {"le", "lt"} & bounds(info))
    ]
    assert unbounded == []


def test_every_setting_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    undocumented = [
        f"AGENTD_{name.upper()}"
        for name in Settings.model_fields
        if f"`AGENTD_{name.upper()}`" not in readme
    ]
    assert undocumented == []


def _environment_reads(tree: ast.Module) -> list[str]:
    """The ``AGENTD_*`` names a module reads from ``os.environ`` (``.get``, ``[...]``,
    ``in``) or ``os.getenv``, spelled out or through a module-level constant."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def name(key: ast.expr) -> str | None:
        value = constants.get(key.id) if isinstance(key, ast.Name) else getattr(key, "value", None)
        return value if isinstance(value, str) and value.startswith("AGENTD_") else None

    def is_environ(node: ast.expr) -> bool:
        return ast.unparse(node) in ("os.environ", "environ")

    keys: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            called = ast.unparse(node.func)
            if called in ("os.getenv", "getenv") or (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and is_environ(node.func.value)
            ):
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and is_environ(node.value):
            keys.append(node.slice)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            keys.append(node.left)
    return [found for key in keys if (found := name(key))]


def test_no_module_reads_an_agentd_setting_from_the_environment_but_settings() -> None:
    """Every setting comes from ``Settings`` (environment, ``agentd.toml``, defaults, in
    that order); only ``AGENTD_HOME``, which says where the config file is, is read raw."""
    root = Path(__file__).parent.parent
    reads = {
        f"{path.relative_to(root)}: {name}"
        for package in ("agentd", "shared", "reflector")
        for path in sorted((root / package).rglob("*.py"))
        for name in _environment_reads(ast.parse(path.read_text()))
    }
    assert reads == {"shared/home.py: AGENTD_HOME"}
