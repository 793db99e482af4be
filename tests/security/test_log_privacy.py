"""What a log line may carry: no frame locals, no prompt text at INFO, and no
secret-shaped value anywhere in it, exception text included."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.redact import redact, redact_secrets
from tests.support.openai_server import FakeOpenAIServer, error_body
from tests.support.processes import AgentdProcess, run_agentctl
from tests.support.waiting import ceiling


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("Invalid key: sk-proj-Abc123xyz789.", "Invalid key: sk-***."),
        ("retrying with api_key=abc123 in 2 s", "retrying with api_key=*** in 2 s"),
        ('{"OPENAI_API_KEY": "k-123", "n": 1}', '{"OPENAI_API_KEY": ***, "n": 1}'),
        ("Authorization: Bearer eyJhbGciOi.J9.x-y", "Authorization: Bearer ***"),
        ("x-api-key: abc, password='p w' then", "x-api-key: ***, password=*** then"),
        ("redis://:hunter2@10.0.0.5:6379/0", "redis://:***@10.0.0.5:6379/0"),
        ("used 12 prompt_tokens of max_tokens=4096", "used 12 prompt_tokens of max_tokens=4096"),
    ],
)
def test_secret_shaped_text_is_masked_and_its_label_kept(text: str, masked: str) -> None:
    assert redact(text) == masked


def test_fields_named_like_secrets_are_masked_at_any_depth_and_counts_are_not() -> None:
    event = {
        "event": "provider_retry",
        "api_key": "plain-looking",
        "request": {
            "client_secret": "s3",
            "headers": [{"Authorization": "Basic dXNlcjpwYXNz"}],
            "usage": {"prompt_tokens": 12, "max_tokens": 4096},
        },
        "error": ("got sk-abcdefghijkl back",),
    }

    assert redact_secrets(None, "warning", event) == {
        "event": "provider_retry",
        "api_key": "***",
        "request": {
            "client_secret": "***",
            "headers": [{"Authorization": "***"}],
            "usage": {"prompt_tokens": 12, "max_tokens": 4096},
        },
        "error": ("got sk-*** back",),
    }


_CRASH = """
import sys
from pathlib import Path
import structlog
from shared.logging import configure

configure("agentd", console_format=sys.argv[2], log_dir=Path(sys.argv[1]))

def call_provider(prompt):
    api_key = "sk-frame0local0canary"
    raise RuntimeError("Incorrect API key provided: sk-exception0text0canary")

try:
    call_provider("PROMPT-CANARY: what the user typed")
except RuntimeError:
    structlog.get_logger("provider").exception("provider_failed")
"""


@pytest.mark.slow
@pytest.mark.parametrize("console_format", ["json", "console"])
def test_a_logged_exception_shows_its_traceback_but_no_frame_locals_or_key(
    tmp_path: Path, console_format: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _CRASH, str(tmp_path), console_format],
        capture_output=True,
        text=True,
        timeout=ceiling(60),
    )
    for written in (run.stderr, (tmp_path / "agentd.log").read_text()):
        assert "provider_failed" in written and "call_provider" in written
        assert "Incorrect API key provided: sk-***" in written
        for canary in ("frame0local0canary", "exception0text0canary", "PROMPT-CANARY"):
            assert canary not in written


TOML_KEY = "sk-toml0canary0key0123456789"
ENV_KEY = "sk-env0canary0key0123456789"
PROMPT = "PROMPT-CANARY please remember my locker code 4471"


@pytest.fixture
def rejecting_provider() -> Iterator[FakeOpenAIServer]:
    """An OpenAI-compatible server that refuses the key and, like OpenAI, echoes it."""
    with FakeOpenAIServer() as server:
        server.enqueue(
            status=401,
            body=error_body(f"Incorrect API key provided: {TOML_KEY}.", code="invalid_api_key"),
        )
        yield server


@pytest.mark.slow
def test_the_daemon_log_holds_no_key_from_config_or_environment_and_no_prompt(
    agentd_home: Path, rejecting_provider: FakeOpenAIServer
) -> None:
    (agentd_home / "agentd.toml").write_text(f'api_key = "{TOML_KEY}"\n')
    agentd = AgentdProcess(
        AGENTD_MODEL="openai/test-model",
        AGENTD_API_BASE=rejecting_provider.url,
        AGENTD_CONTEXT_WINDOW="32000",
        OPENAI_API_KEY=ENV_KEY,
    ).start()
    try:
        chat = run_agentctl("chat", "-p", PROMPT, env=agentd.env)
    finally:
        agentd.stop()

    assert chat.returncode == 1 and "rejected the credentials" in chat.stderr
    logged = "".join(path.read_text() for path in (agentd_home / "logs").glob("agentd*.log*"))
    assert '"event": "turn_failed"' in logged and "Incorrect API key provided: sk-***" in logged
    for canary in (TOML_KEY, ENV_KEY, "locker code"):
        assert canary not in logged
