"""Settings: environment over agentd.toml over defaults; bad values are refused by name."""

from __future__ import annotations

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
