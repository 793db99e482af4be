"""Settings a new user gets wrong, refused by ``agentd up`` and ``agentd doctor`` as the
README promises: exit 2 and one line that names what to fix, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import ceiling

pytestmark = pytest.mark.slow  # a process of agentd per test

COMMANDS = [["up"], ["doctor"]]


def agentd(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=ceiling(120),
    )


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one complaint of a refused start, checked to be nothing more."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("agentd: invalid settings: "), result.stderr
    return result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_malformed_config_file_is_named_with_its_line(
    command: list[str], agentd_home: Path
) -> None:
    (agentd_home / "agentd.toml").write_text('model = "mock"\nworkers = = 3\n')
    said = refused(agentd(*command))
    assert f"{agentd_home / 'agentd.toml'} is not valid TOML" in said
    assert "line 2" in said
    assert len(said.splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_key_in_the_config_file_is_refused_with_the_nearest_name(
    command: list[str], agentd_home: Path
) -> None:
    (agentd_home / "agentd.toml").write_text("tool_netwrok = true\n")
    said = refused(agentd(*command))
    assert "unknown setting `tool_netwrok` (did you mean `tool_network`?)" in said


def test_the_home_cannot_be_set_in_the_file_inside_it(agentd_home: Path) -> None:
    (agentd_home / "agentd.toml").write_text('home = "/elsewhere"\n')
    assert "set AGENTD_HOME in the environment" in refused(agentd("doctor"))


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_variable_is_named_as_the_user_wrote_it(command: list[str]) -> None:
    said = refused(agentd(*command, AGENTD_WORKERS="abc"))
    assert "AGENTD_WORKERS='abc': Input should be a valid integer" in said
    assert "pydantic" not in said and "For further information" not in said


def test_a_bad_value_in_the_file_is_named_with_the_file(agentd_home: Path) -> None:
    (agentd_home / "agentd.toml").write_text("workers = -1\n")
    said = refused(agentd("doctor"))
    assert f"`workers` in {agentd_home / 'agentd.toml'}: Input should be greater" in said


def test_a_bad_web_address_is_named_as_the_flag() -> None:
    said = refused(agentd("up", "--web", "nowhere"))
    assert "--web 'nowhere': String should match pattern" in said


@pytest.mark.parametrize("flags", [[], ["--worker"]])
def test_doctor_stops_quietly_when_its_reader_has_gone(flags: list[str]) -> None:
    """``agentd doctor | head -1``: the reader gone before the next line (here before the
    first, so the write surely fails) is no error of doctor's."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "agentd.cli", "doctor", *flags],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=ceiling(120),
        )
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_table_in_the_config_file_is_left_to_its_reader(agentd_home: Path) -> None:
    """Every setting is a plain value, so a ``[section]`` is no misspelt one."""
    (agentd_home / "agentd.toml").write_text("workers = 1\n\n[other_tool]\nx = 1\n")
    result = agentd("doctor")
    assert "invalid settings" not in result.stderr and result.returncode in (0, 1)
