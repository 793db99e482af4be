"""The suite's own harness, run as a pytest of its own on a module written for the test:
what each worker pays at collection, and what one test leaves to the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.waiting import ceiling

REPO = Path(__file__).resolve().parent.parent

SPEAKER = """
from tests.support.sdk import LazyModule

sdk = LazyModule("stand_in_target")


def test_speaks_the_sdk() -> None:
    assert sdk.VALUE == 1
"""

REPORTER = """
import sys


def pytest_collection_finish(session):
    print("collected; imported:", "stand_in_target" in sys.modules)


def pytest_sessionfinish(session):
    print("ran; imported:", "stand_in_target" in sys.modules)
"""

LOGGING_ON_CAPSYS = """
import logging

from shared.logging import configure


def test_an_entry_point_configures_logging_under_capsys(capsys) -> None:
    configure("agentd-doctor", level="WARNING")  # as agentd doctor run in-process does


def test_a_later_test_logs_a_warning() -> None:
    logging.getLogger("later").warning("a warning of a later test")
"""


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in ``directory``, with this repository importable, and none of the options
    or plugins the suite itself was run with."""
    unwanted = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
    env = {k: v for k, v in os.environ.items() if k not in unwanted}
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )


def test_collecting_a_module_that_names_an_sdk_does_not_import_it(tmp_path: Path) -> None:
    """Real collection: it looks up pytest's private marks on every name of the module,
    and the stand-in must not import its module for those."""
    (tmp_path / "stand_in_target.py").write_text("VALUE = 1\n")
    (tmp_path / "test_speaker.py").write_text(SPEAKER)
    (tmp_path / "conftest.py").write_text(REPORTER)

    collected = _pytest(tmp_path, "--collect-only")
    ran = _pytest(tmp_path)

    assert "collected; imported: False" in collected.stdout, collected.stdout + collected.stderr
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ran; imported: True" in ran.stdout, "the test that speaks the SDK imports it"


def test_logging_set_up_on_a_stream_capsys_closed_costs_later_tests_nothing(
    tmp_path: Path,
) -> None:
    """With the suite's fixtures (tests/conftest.py), a test after one that configured
    logging onto capsys's stream logs without a ``--- Logging error ---``."""
    (tmp_path / "test_logging_on_capsys.py").write_text(LOGGING_ON_CAPSYS)

    ran = _pytest(tmp_path, "-p", "tests.conftest")  # its tests run in the order written

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 passed" in ran.stdout, ran.stdout + ran.stderr
    assert "Logging error" not in ran.stdout + ran.stderr, ran.stdout + ran.stderr
