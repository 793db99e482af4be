"""LiteLLMProvider over real HTTP (litellm → openai SDK → httpx) against a local fake server.

Each test scripts the fake's answers, runs one ``complete`` and checks both what came back
and what the server received. Retries never wait: the provider gets a recording ``sleep``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import httpx
import pytest
from structlog.testing import capture_logs

from shared.errors import (
    AgentdError,
    ContextOverflowError,
    ProviderAuthError,
    ProviderConfigError,
    ProviderHTTPError,
    ProviderMisbehaved,
    ProviderTimeout,
    ProviderUnreachable,
)
from shared.models.messages import Message, ToolCall
from shared.providers.base import ModelRequest, ModelResponse, ToolSchema
from shared.providers.litellm_errors import Failure, failure_of, map_litellm_errors
from shared.providers.litellm_provider import DEFAULT_CONTEXT_WINDOW, LiteLLMProvider
from shared.providers.retry_notices import RetryNotice, retries_announced_to
from tests.support.messages import stop_payload, summary_payload
from tests.support.openai_server import (
    FakeOpenAIServer,
    chat_completion,
    error_body,
    tool_call,
    usage,
)
from tests.support.waiting import ceiling

pytestmark = [pytest.mark.slow, pytest.mark.sdk]  # imports litellm

MODEL = "openai/test-model"
ROOT = Path(__file__).resolve().parents[2]
CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted "
    "in 9000 tokens. Please reduce the length of the messages."
)
BASH_TOOL = ToolSchema(
    name="bash",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}},
)

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Sleeps(list[float]):
    """The injected ``sleep``: records each delay instead of waiting."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def provider(openai_server: FakeOpenAIServer, sleeps: Sleeps) -> LiteLLMProvider:
    return make_provider(openai_server, sleeps)


def make_provider(server: FakeOpenAIServer, sleeps: Sleeps, **overrides: Any) -> LiteLLMProvider:
    options: dict[str, Any] = {
        "model": MODEL,
        "api_base": server.url,
        "api_key": "sk-test",
        "context_window": 8192,
        "timeout_s": 5.0,
        "attempts": 4,
        "block_remote": True,
        "sleep": sleeps,
    }
    options.update(overrides)
    return LiteLLMProvider(**options)


def message(role: str, content: str = "", **fields: Any) -> Message:
    return Message.of(
        id="msg-x",
        agent_id="agent-1",
        conversation_id="conv-1",
        role=role,
        content=content,
        **fields,
    )


def ask(text: str = "hi") -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=[message("user", text)])


# --- answers -------------------------------------------------------------------------------


def test_plain_text_answer_comes_back_with_stop_and_usage(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer
) -> None:
    openai_server.enqueue(body=chat_completion("hello there", usage=usage(12, 3)))

    response = run(provider.complete(ask()))

    assert response.text == "hello there"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.model == MODEL
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    assert len(openai_server.requests) == 1


def test_tool_calls_keep_raw_arguments_and_history_is_sent_in_openai_shape(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer
) -> None:
    openai_server.enqueue(
        body=chat_completion(
            None,
            tool_calls=[
                tool_call("bash", '{"cmd": "ls -a"}', id="call-a"),
                tool_call("bash", '{"cmd": ', id="call-b"),
            ],
        )
    )
    history = [
        message("user", "list files"),
        message(
            "assistant",
            tool_calls=[ToolCall(id="call-0", name="bash", arguments='{"cmd": "pwd"}')],
        ),
        message("tool", "/home/me", tool_call_id="call-0", name="bash"),
        message(
            "user",
            "Earlier: the user likes short answers.",
            kind="summary",
            payload=summary_payload(),
        ),
        message(
            "assistant", "turn failed", kind="stop", stop_reason="error", payload=stop_payload()
        ),
    ]
    request = ModelRequest(
        system="You are terse.", messages=history, tools=[BASH_TOOL], max_output_tokens=256
    )

    response = run(provider.complete(request))

    assert response.finish_reason == "tool_calls"
    assert response.text == ""
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call-a", "bash", '{"cmd": "ls -a"}'),
        ("call-b", "bash", '{"cmd": '),
    ]
    sent = openai_server.requests[0]
    assert sent["messages"][2].pop("content", None) is None  # litellm drops a null content
    assert sent["model"] == "test-model"
    assert sent["tools"] == [BASH_TOOL.to_openai()]
    assert sent["max_tokens"] == 256
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call-0",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "pwd"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call-0", "content": "/home/me"},
        {"role": "user", "content": "Earlier: the user likes short answers."},
    ]


def test_request_without_tools_sends_no_tools_key(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer
) -> None:
    run(provider.complete(ask()))

    assert "tools" not in openai_server.requests[0]
    assert "max_tokens" not in openai_server.requests[0]


def test_cached_prompt_tokens_are_split_out_of_input_tokens(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer
) -> None:
    openai_server.enqueue(
        body=chat_completion("ok", usage=usage(1500, 20, cached_tokens=1024, reasoning_tokens=7))
    )

    got = run(provider.complete(ask())).usage

    assert got.input_tokens == 476
    assert got.cache_read_tokens == 1024
    assert got.cache_write_tokens == 0
    assert got.output_tokens == 20
    assert got.reasoning_tokens == 7
    assert got.context_tokens == 1520


def test_length_finish_reason_is_reported_as_length(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer
) -> None:
    openai_server.enqueue(body=chat_completion("cut sh", finish_reason="length"))

    assert run(provider.complete(ask())).finish_reason == "length"


# --- errors and retries --------------------------------------------------------------------


def test_context_length_400_becomes_context_overflow_error(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    openai_server.enqueue(
        status=400, body=error_body(CONTEXT_LENGTH_MESSAGE, code="context_length_exceeded")
    )

    with pytest.raises(ContextOverflowError, match=MODEL):
        run(provider.complete(ask()))

    assert len(openai_server.requests) == 1
    assert sleeps == []


class Notices(list[RetryNotice]):
    """A retry listener that records what the waiting turn would be told."""

    async def __call__(self, notice: RetryNotice) -> None:
        self.append(notice)


def complete_announcing(provider: LiteLLMProvider, notices: Notices) -> ModelResponse:
    async def call() -> ModelResponse:
        with retries_announced_to(notices):
            return await provider.complete(ask())

    return run(call())


def test_rate_limit_then_success_retries_once_after_a_backoff_and_announces_it(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    openai_server.enqueue(status=429, body=error_body("slow down", type="rate_limit_error"))
    openai_server.enqueue(body=chat_completion("finally"))
    notices = Notices()

    with capture_logs() as logs:
        response = complete_announcing(provider, notices)

    assert response.text == "finally"
    assert len(openai_server.requests) == 2
    assert len(sleeps) == 1
    assert 1.0 <= sleeps[0] < 1.5
    retries = [entry for entry in logs if entry["event"] == "provider_retry"]
    assert [(r["attempt"], r["log_level"]) for r in retries] == [(1, "warning")]
    assert [(n.reason, n.delay_s, n.attempt, n.attempts) for n in notices] == [
        ("HTTP 429", sleeps[0], 1, 4)
    ]


def test_retry_after_header_is_honoured_and_capped_at_a_minute(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    openai_server.enqueue(status=429, body=error_body("slow"), headers={"Retry-After": "7"})
    openai_server.enqueue(status=503, body=error_body("busy"), headers={"Retry-After": "600"})
    openai_server.enqueue(body=chat_completion("ok"))

    run(provider.complete(ask()))

    assert sleeps == [7.0, 60.0]


def test_server_error_on_every_attempt_becomes_provider_http_error_500(
    openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    provider = make_provider(openai_server, sleeps, attempts=3)
    for _ in range(3):
        openai_server.enqueue(status=500, body=error_body("boom", type="server_error"))
    notices = Notices()

    with pytest.raises(ProviderHTTPError, match=MODEL) as caught:
        complete_announcing(provider, notices)

    assert caught.value.status_code == 500
    assert caught.value.model == MODEL
    assert len(openai_server.requests) == 3
    assert len(sleeps) == 2
    assert [n.reason for n in notices] == ["HTTP 500", "HTTP 500"]


def test_a_missing_api_key_is_provider_auth_at_once_naming_the_variable(
    openai_server: FakeOpenAIServer, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider = make_provider(openai_server, sleeps, api_key=None)

    with pytest.raises(ProviderAuthError, match="set OPENAI_API_KEY") as caught:
        run(provider.complete(ask()))

    assert "HTTP 500" not in caught.value.message
    assert openai_server.requests == []
    assert sleeps == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_closed_port_is_provider_unreachable_naming_the_url_after_one_retry(
    sleeps: Sleeps,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    provider = LiteLLMProvider(
        model=MODEL, api_base=url, api_key="sk-test", context_window=8192, sleep=sleeps
    )
    notices = Notices()

    with pytest.raises(ProviderUnreachable, match="connection refused") as caught:
        complete_announcing(provider, notices)

    assert caught.value.url == url
    assert url in caught.value.message and "AGENTD_API_BASE" in caught.value.message
    assert len(sleeps) == 1
    assert [n.reason for n in notices] == ["unreachable"]


def test_a_host_that_does_not_resolve_is_provider_unreachable(
    sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole real chain (litellm → openai SDK → httpx → the resolver): only the lookup
    of the one unresolvable name is answered here, so no test depends on the network's DNS."""
    url = "http://nosuch.invalid/v1"
    looked_up: list[str] = []
    resolve = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "nosuch.invalid":
            looked_up.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    provider = LiteLLMProvider(
        model=MODEL, api_base=url, api_key="sk-test", context_window=8192, sleep=sleeps
    )
    notices = Notices()

    with pytest.raises(ProviderUnreachable) as caught:
        complete_announcing(provider, notices)

    assert f"{url} (the host name does not resolve)" in caught.value.message
    assert caught.value.url == url
    assert looked_up and set(looked_up) == {"nosuch.invalid"}
    assert [n.reason for n in notices] == ["unreachable"]


def test_slow_server_times_out_into_provider_timeout_at_once_without_retrying(
    openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    provider = make_provider(openai_server, sleeps, attempts=4, timeout_s=0.2)
    for _ in range(2):
        openai_server.enqueue(body=chat_completion("late"), delay_s=0.6)

    with pytest.raises(ProviderTimeout) as caught:
        run(provider.complete(ask()))

    assert caught.value.code == "provider_timeout"
    assert "sent nothing for 0.2 s (AGENTD_PROVIDER_TIMEOUT_S)" in caught.value.message
    assert isinstance(caught.value, ProviderHTTPError)
    assert caught.value.status_code is None
    assert len(openai_server.requests) == 1
    assert sleeps == []


def test_unauthorized_401_becomes_provider_auth_error_naming_the_key(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer
) -> None:
    openai_server.enqueue(status=401, body=error_body("Incorrect API key provided"))

    with pytest.raises(ProviderAuthError, match="OPENAI_API_KEY") as caught:
        run(provider.complete(ask()))

    assert MODEL in caught.value.message
    assert len(openai_server.requests) == 1


def test_model_string_without_known_provider_becomes_config_error_before_any_request(
    openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    provider = make_provider(openai_server, sleeps, model="nosuchprovider/x")

    with pytest.raises(ProviderConfigError, match="openai/gpt-4o"):
        run(provider.complete(ask()))

    assert openai_server.requests == []


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(404, error_body("The model `gpt-9` does not exist"), id="404"),
        pytest.param(
            400,
            error_body("The model `gpt-9` does not exist", code="model_not_found"),
            id="400-model-not-found",
        ),
        pytest.param(
            404, error_body("model 'llama9' not found, try pulling it first"), id="ollama-pull"
        ),
        pytest.param(400, error_body("library/gemma:2b does not support tools"), id="no-tools"),
    ],
)
def test_a_refusal_that_names_an_unknown_model_or_endpoint_is_a_config_error(
    openai_server: FakeOpenAIServer, sleeps: Sleeps, status: int, body: dict[str, Any]
) -> None:
    openai_server.enqueue(status=status, body=body)

    with pytest.raises(ProviderConfigError, match="check the model string") as caught:
        run(make_provider(openai_server, sleeps).complete(ask()))

    assert MODEL in caught.value.message
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(400, error_body("Invalid 'messages[3].tool_call_id'"), id="400-plain"),
        pytest.param(400, {"detail": "bad"}, id="400-no-error-body"),
        pytest.param(422, error_body("unprocessable tool schema"), id="422"),
    ],
)
def test_any_other_refused_request_is_an_http_error_not_a_config_error(
    openai_server: FakeOpenAIServer, sleeps: Sleeps, status: int, body: dict[str, Any]
) -> None:
    """Reflection pauses an agent on a config error: a provider's one-off 400 must not."""
    openai_server.enqueue(status=status, body=body)

    with pytest.raises(
        ProviderHTTPError, match=f"refused the request \\(HTTP {status}\\)"
    ) as caught:
        run(make_provider(openai_server, sleeps).complete(ask()))

    assert not isinstance(caught.value, ProviderConfigError)
    assert (caught.value.code, caught.value.status_code) == ("provider_http", status)
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda body: body.update(choices=[]), id="empty-choices"),
        pytest.param(lambda body: body.pop("choices"), id="no-choices-key"),
        pytest.param(lambda body: body["choices"][0].pop("message"), id="no-message"),
        pytest.param(
            lambda body: body["choices"][0]["message"].update(
                tool_calls=[{"id": "c", "type": "function", "function": {"arguments": "{}"}}]
            ),
            id="tool-call-without-name",
        ),
    ],
)
def test_unusable_response_becomes_provider_misbehaved_without_retry(
    provider: LiteLLMProvider, openai_server: FakeOpenAIServer, mangle: Any
) -> None:
    body = chat_completion("ok")
    mangle(body)
    openai_server.enqueue(body=body)

    with pytest.raises(ProviderMisbehaved, match=MODEL):
        run(provider.complete(ask()))

    assert len(openai_server.requests) == 1


def test_tool_call_without_id_gets_a_generated_one(provider: LiteLLMProvider) -> None:
    # litellm itself fills in missing ids, so this shape can only be reached directly.
    calls = [
        SimpleNamespace(id=None, function=SimpleNamespace(name="bash", arguments='{"cmd":"ls"}')),
        SimpleNamespace(id="", function=SimpleNamespace(name="bash", arguments=None)),
    ]
    raw = SimpleNamespace(
        choices=[
            SimpleNamespace(
                message=SimpleNamespace(content=None, tool_calls=calls), finish_reason="stop"
            )
        ],
        usage=None,
    )

    response: ModelResponse = provider._parse_response(raw)

    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call-1", '{"cmd":"ls"}'),
        ("call-2", "{}"),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage.context_tokens == 0


@pytest.mark.parametrize(
    "api_base",
    [
        None,
        "https://api.openai.com/v1",
        "http://10.0.0.1:8080/v1",
        "http://127.0.0.1.example.com/v1",
    ],
)
def test_remote_api_base_is_refused_when_remote_models_are_blocked(
    openai_server: FakeOpenAIServer, sleeps: Sleeps, api_base: str | None
) -> None:
    provider = make_provider(openai_server, sleeps, api_base=api_base, timeout_s=0.5, attempts=1)

    with pytest.raises(ProviderConfigError, match="remote model requests are disabled in tests"):
        run(provider.complete(ask()))


# --- construction --------------------------------------------------------------------------


def test_context_window_comes_from_argument_then_litellm_then_default(
    openai_server: FakeOpenAIServer, sleeps: Sleeps
) -> None:
    given = make_provider(openai_server, sleeps, context_window=1000)
    mapped = make_provider(openai_server, sleeps, model="openai/gpt-3.5-turbo", context_window=None)
    with capture_logs() as logs:
        unknown = make_provider(openai_server, sleeps, context_window=None)

    assert (given.context_window, given.context_window_source) == (1000, "setting")
    assert (mapped.context_window, mapped.context_window_source) == (16385, "model map")
    assert (unknown.context_window, unknown.context_window_source) == (
        DEFAULT_CONTEXT_WINDOW,
        "default",
    )
    assert any("AGENTD_CONTEXT_WINDOW" in str(entry.get("hint")) for entry in logs)


def test_importing_the_module_does_not_import_litellm() -> None:
    code = (
        "import sys, shared.providers.litellm_provider; "
        "sys.exit(1 if 'litellm' in sys.modules else 0)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=ceiling(60)
    )

    assert result.returncode == 0, result.stderr.decode()


# --- the error boundary --------------------------------------------------------------------

_REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
_SAMPLE_ARGUMENTS: dict[str, Any] = {
    "message": "something went wrong",
    "llm_provider": "openai",
    "model": MODEL,
    "response": httpx.Response(400, request=_REQUEST),
    "request": _REQUEST,
    "status_code": 500,
    "failures": [{"vector_store_id": "vs-1", "error": "down"}],
    "request_data": {},
    "raw_response": "{}",
    "schema": "{}",
    "current_cost": 2.0,
    "max_budget": 1.0,
    "entity_type": "EMAIL",
    "route_to_model": "ollama/llama3.1",
    "session_id": "session-1",
}
"""Constructor arguments by name; ``response``/``request`` are passed even where optional."""
_EXPECTED: dict[str, tuple[Failure, type[AgentdError]]] = {
    "APIConnectionError": ("connection_lost", ProviderHTTPError),
    "APIError": ("server_error", ProviderHTTPError),  # says only its status: 500 here
    "APIResponseValidationError": ("misbehaved", ProviderMisbehaved),
    "AuthenticationError": ("auth", ProviderAuthError),
    "BadGatewayError": ("server_error", ProviderHTTPError),
    "BadRequestError": ("bad_request", ProviderHTTPError),
    "BlockedPiiEntityError": ("refused", ProviderHTTPError),
    "BudgetExceededError": ("refused", ProviderHTTPError),
    "CallerCredentialAuthenticationError": ("auth", ProviderAuthError),
    "CallerCredentialRateLimitError": ("rate_limited", ProviderHTTPError),
    "ContentPolicyViolationError": ("refused", ProviderHTTPError),
    "ContextWindowExceededError": ("overflow", ContextOverflowError),
    "EndpointNotSupportedByModelError": ("bad_config", ProviderConfigError),
    "GuardrailRaisedException": ("refused", ProviderHTTPError),
    "ImageFetchError": ("bad_request", ProviderHTTPError),
    "InternalServerError": ("server_error", ProviderHTTPError),
    "InvalidRequestError": ("bad_request", ProviderHTTPError),
    "JSONSchemaValidationError": ("misbehaved", ProviderMisbehaved),
    "LiteLLMUnknownProvider": ("bad_config", ProviderConfigError),
    "MalformedRequestFieldError": ("bad_request", ProviderHTTPError),
    "MidStreamFallbackError": ("server_error", ProviderHTTPError),
    "MockException": ("server_error", ProviderHTTPError),
    "ModelNotMappedError": ("bad_config", ProviderConfigError),
    "ModifyResponseException": ("refused", ProviderHTTPError),
    "NotFoundError": ("bad_config", ProviderConfigError),
    "OpenAIError": ("other", ProviderHTTPError),
    "PaymentRequiredError": ("refused", ProviderHTTPError),
    "PermissionDeniedError": ("auth", ProviderAuthError),
    "RateLimitError": ("rate_limited", ProviderHTTPError),
    "RejectedRequestError": ("refused", ProviderHTTPError),
    "SensitiveDataRouteException": ("refused", ProviderHTTPError),
    "ServiceUnavailableError": ("server_error", ProviderHTTPError),
    "Timeout": ("timeout", ProviderTimeout),
    "UnprocessableEntityError": ("bad_request", ProviderHTTPError),
    "UnsupportedEndpointError": ("bad_config", ProviderConfigError),
    "UnsupportedParamsError": ("bad_config", ProviderConfigError),
    "VectorStoreSearchError": ("bad_request", ProviderHTTPError),
}
"""Where each of litellm's exception classes lands, by its class alone: the samples carry
no words that say what went wrong (a status of 500 where one is asked for). A class a
new litellm adds fails the walk until it is placed here and in the mapping."""


def _litellm_exception_classes() -> list[type[Exception]]:
    import litellm.exceptions

    module = litellm.exceptions
    return [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and issubclass(cls, Exception)
        and cls.__module__ == module.__name__
    ]


def _instantiate(cls: type[Exception]) -> Exception:
    kwargs: dict[str, Any] = {}
    for name, param in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in _SAMPLE_ARGUMENTS and (
            param.default is param.empty or name in ("response", "request")
        ):
            kwargs[name] = _SAMPLE_ARGUMENTS[name]
        elif param.default is param.empty:
            raise AssertionError(f"no sample value for {cls.__name__}({name}=…); add one")
    return cls(**kwargs)


def test_every_litellm_exception_class_maps_by_class_to_a_typed_agentd_error() -> None:
    classes = _litellm_exception_classes()
    assert len(classes) >= 20
    assert {cls.__name__ for cls in classes} == set(_EXPECTED), "place every class"
    wrong: dict[str, str] = {}

    for cls in classes:
        original = _instantiate(cls)
        with pytest.raises(AgentdError) as caught, map_litellm_errors(MODEL):
            raise original
        error = caught.value
        failure, expected = _EXPECTED[cls.__name__]
        found = (failure_of(original), type(error))
        if found != (failure, expected) or error.__cause__ is not original:
            wrong[cls.__name__] = f"{found}, expected {(failure, expected)}"
        elif MODEL not in error.message:
            wrong[cls.__name__] = f"message does not name the model: {error.message}"

    assert wrong == {}
