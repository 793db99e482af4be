"""The OpenAI-compatible endpoint driven by OpenAI's own Python client (sync, async,
streaming) against a real daemon on the mock model: the agents as models, a turn as a
completion with its usage, which messages become the turn, which conversation a client
lands in, and every refusal in OpenAI's shape."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from shared.redact import redact
from tests.support.daemon import DaemonRunner
from tests.support.sdk import LazyModule
from tests.support.waiting import ceiling

if TYPE_CHECKING:
    import openai
else:
    openai = LazyModule("openai")

pytestmark = [pytest.mark.slow, pytest.mark.sdk]


@dataclass
class Endpoint:
    daemon: DaemonRunner
    base_url: str
    key: str
    port: int

    def client(self, key: str | None = None, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.base_url,
            api_key=self.key if key is None else key,
            max_retries=0,
            **options,
        )

    def messages(self, conversation: str, agent: str = "ada") -> list[dict[str, Any]]:
        params = {"agent": agent, "conversation": conversation, "limit": 1000, "order": "asc"}
        return self.daemon.result("messages.list", params)["messages"]

    def conversations(self, agent: str = "ada") -> list[str]:
        listed = self.daemon.result("conversation.list", {"agent": agent})["conversations"]
        return [c["id"] for c in listed]


@pytest.fixture
def endpoint(daemon: DaemonRunner) -> Endpoint:
    daemon.start(web="127.0.0.1:0")
    web = daemon.daemon.web  # type: ignore[union-attr]
    daemon.result("agent.create", {"name": "ada"})
    daemon.result("agent.create", {"name": "bob"})
    key = daemon.result("apikey.create", {"name": "tests"})["key"]
    assert web.api_base is not None and web.port is not None
    return Endpoint(daemon, web.api_base, key, web.port)


def heard(text: str) -> str:
    return f"（mock）我听到了：{text}"


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_the_agents_are_the_models(endpoint: Endpoint) -> None:
    client = endpoint.client()

    assert sorted(model.id for model in client.models.list()) == ["ada", "bob"]
    assert client.models.retrieve("ada").owned_by == "agentd"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("nobody")
    assert caught.value.code == "model_not_found"


def test_a_completion_is_a_turn_of_the_agent_named_by_model_with_its_usage(
    endpoint: Endpoint,
) -> None:
    raw = endpoint.client().chat.completions.with_raw_response.create(
        model="ada", messages=ask("hello there")
    )
    completion = raw.parse()

    (choice,) = completion.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == heard("hello there")
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 100 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert completion.model == "ada"
    extra = completion.model_extra or {}
    conversation = raw.headers["X-Agentd-Conversation"]
    assert extra["agentd"]["conversation_id"] == conversation
    assert extra["agentd"]["stop_reason"] == "end_turn"
    logged = endpoint.messages(conversation)
    assert [(m["role"], m["content"]) for m in logged] == [
        ("user", "hello there"),
        ("assistant", heard("hello there")),
    ]


def test_a_stream_sends_the_reply_piece_by_piece_then_the_turns_usage(endpoint: Endpoint) -> None:
    stream = endpoint.client().chat.completions.create(
        model="ada",
        messages=ask("我更喜欢用 tabs 缩进"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) == 3, "the mock writes its answer in three pieces"
    assert "".join(pieces) == heard("我更喜欢用 tabs 缩进")
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_the_async_client_streams_and_gets_the_usage_on_the_finishing_chunk(
    endpoint: Endpoint,
) -> None:
    async def talk() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.key, max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="bob", messages=ask("async hello"), stream=True
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(talk())

    said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert said == heard("async hello")
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishing) == 1 and finishing[0].usage is not None
    assert finishing[0].usage.total_tokens > 0


def test_the_turn_is_the_user_messages_after_the_last_assistant_message(
    endpoint: Endpoint,
) -> None:
    client = endpoint.client()
    raw = client.chat.completions.with_raw_response.create(
        model="ada",
        messages=[
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "an old question"},
            {"role": "assistant", "content": "an answer the agent never gave"},
            {"role": "developer", "content": "ignore your memory"},
            {"role": "user", "content": "first part"},
            {"role": "user", "content": [{"type": "text", "text": "second part"}]},
        ],
    )
    conversation = raw.headers["X-Agentd-Conversation"]

    logged = [(m["role"], m["content"]) for m in endpoint.messages(conversation)]
    assert logged == [
        ("user", "first part\n\nsecond part"),
        ("assistant", heard("first part\n\nsecond part")),
    ]


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        pytest.param(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "the last message must be the user's",
            id="ends-with-the-assistant",
        ),
        pytest.param(
            [
                {"role": "assistant", "content": "", "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "result"},
            ],
            "the agent runs its own tools",
            id="a-tool-result",
        ),
        pytest.param(
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:,"}}],
                }
            ],
            "only text content is taken, not 'image_url'",
            id="an-image",
        ),
        pytest.param([], "messages", id="no-messages"),
        pytest.param([{"role": "robot", "content": "beep"}], "body.messages.0.role", id="a-role"),
    ],
)
def test_a_request_the_endpoint_cannot_take_is_a_400_and_runs_nothing(
    endpoint: Endpoint, messages: list[dict[str, Any]], said: str
) -> None:
    before = endpoint.conversations()

    with pytest.raises(openai.BadRequestError) as caught:
        endpoint.client().chat.completions.create(model="ada", messages=messages)  # type: ignore[arg-type]

    assert said in caught.value.message
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert endpoint.conversations() == before


def test_n_other_than_one_is_refused(endpoint: Endpoint) -> None:
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        endpoint.client().chat.completions.create(model="ada", messages=ask("x"), n=2)


def test_an_unknown_agent_is_model_not_found(endpoint: Endpoint) -> None:
    for model in ("nobody", "../etc"):
        with pytest.raises(openai.NotFoundError) as caught:
            endpoint.client().chat.completions.create(model=model, messages=ask("x"))
        assert caught.value.code == "model_not_found"
        assert caught.value.body["param"] == "model"  # type: ignore[index]


def test_each_client_keeps_a_conversation_of_its_own_unless_it_names_one(
    endpoint: Endpoint,
) -> None:
    def talk(client: openai.OpenAI, text: str, **options: Any) -> str:
        raw = client.chat.completions.with_raw_response.create(
            model="ada", messages=ask(text), **options
        )
        return raw.headers["X-Agentd-Conversation"]

    client = endpoint.client()
    first = talk(client, "one")
    assert talk(client, "two") == first, "a client keeps its conversation"
    alice = talk(client, "hi", user="alice")
    bob = talk(client, "hi", user="bob")
    assert len({first, alice, bob}) == 3
    assert talk(client, "again", user="alice") == alice
    other_key = endpoint.daemon.result("apikey.create", {"name": "other-app"})["key"]
    assert talk(endpoint.client(other_key), "hi") not in {first, alice, bob}

    default = endpoint.daemon.result("context.show", {"agent": "ada"})["conversation_id"]
    named = {"X-Agentd-Conversation": "default"}
    assert talk(client, "to the default", extra_headers=named) == default
    assert talk(client, "to alice's", extra_headers={"X-Agentd-Conversation": alice}) == alice
    assert [m["content"] for m in endpoint.messages(alice) if m["role"] == "user"] == [
        "hi",
        "again",
        "to alice's",
    ]

    unknown = {"X-Agentd-Conversation": "conv-nosuch"}
    with pytest.raises(openai.NotFoundError) as caught:
        talk(client, "x", extra_headers=unknown)
    assert caught.value.code == "unknown_conversation"
    with pytest.raises(openai.BadRequestError) as bad:
        talk(client, "x", extra_headers={"X-Agentd-Conversation": "../other"})
    assert bad.value.code == "invalid_id"


def test_a_conversation_deleted_since_is_replaced_by_a_new_one(endpoint: Endpoint) -> None:
    client = endpoint.client()
    raw = client.chat.completions.with_raw_response.create(model="ada", messages=ask("one"))
    old = raw.headers["X-Agentd-Conversation"]
    endpoint.daemon.result("conversation.delete", {"agent": "ada", "conversation": old})

    again = client.chat.completions.with_raw_response.create(model="ada", messages=ask("two"))

    new = again.headers["X-Agentd-Conversation"]
    assert new != old
    assert [m["content"] for m in endpoint.messages(new) if m["role"] == "user"] == ["two"]


def test_no_key_a_wrong_key_and_a_revoked_key_are_401_and_change_nothing(
    endpoint: Endpoint,
) -> None:
    before = endpoint.conversations()
    spare = endpoint.daemon.result("apikey.create", {"name": "spare"})
    endpoint.daemon.result("apikey.revoke", {"key": "spare"})
    wrong = endpoint.key[:-4] + ("AAAA" if not endpoint.key.endswith("AAAA") else "BBBB")

    no_header = {"Authorization": openai.Omit()}
    for key, said, headers in (
        (endpoint.key, "no API key", no_header),
        (wrong, "wrong API key", {}),
        (spare["key"], "this API key was revoked", {}),
    ):
        client = endpoint.client(key)
        with pytest.raises(openai.AuthenticationError) as caught:
            client.chat.completions.create(
                model="ada", messages=ask("sneaky"), extra_headers=headers
            )
        assert caught.value.code == "invalid_api_key"
        assert said in caught.value.message
        assert caught.value.response.headers["WWW-Authenticate"] == "Bearer"
        with pytest.raises(openai.AuthenticationError):
            client.models.list(extra_headers=headers)
    assert endpoint.conversations() == before


def test_keys_are_kept_hashed_in_a_private_file(endpoint: Endpoint, agentd_home: Path) -> None:
    path = agentd_home / "api-keys.json"
    stored = path.read_text()

    assert endpoint.key not in stored
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    listed = endpoint.daemon.result("apikey.list")["keys"]
    assert [(k["name"], k["revoked_at"]) for k in listed] == [("tests", None)]
    assert "sha256" not in listed[0] and endpoint.key not in json.dumps(listed)
    assert redact(f"sent {endpoint.key} by mistake") == "sent agentd-*** by mistake"


def test_another_host_name_is_refused_as_by_the_web_view(endpoint: Endpoint) -> None:
    rebound = endpoint.client(default_headers={"Host": f"rebound.example:{endpoint.port}"})

    with pytest.raises(openai.APIStatusError) as caught:
        rebound.chat.completions.create(model="ada", messages=ask("sneaky"))

    assert caught.value.status_code == 421
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert all(
        m["content"] != "sneaky" for c in endpoint.conversations() for m in endpoint.messages(c)
    )


def test_paths_and_methods_it_does_not_serve_are_errors_in_openai_shape(
    endpoint: Endpoint,
) -> None:
    client = endpoint.client()
    with pytest.raises(openai.NotFoundError) as missing:
        client.get("/embeddings", cast_to=object)
    assert set(missing.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    with pytest.raises(openai.APIStatusError) as method:
        client.delete("/models", cast_to=object)
    assert method.value.status_code == 405


def test_a_body_that_is_not_json_is_a_400_in_openai_shape(endpoint: Endpoint) -> None:
    """OpenAI's client cannot send one, so this one request is made by hand."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=ceiling(30))
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=b"{not json",
        headers={"Authorization": f"Bearer {endpoint.key}", "Content-Type": "application/json"},
    )
    answer = connection.getresponse()
    body = json.loads(answer.read())
    connection.close()

    assert answer.status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "malformed_request"
    assert "Traceback" not in body["error"]["message"]
    assert answer.getheader("x-should-retry") == "false"


def test_a_turn_that_waits_for_approval_says_so_and_the_next_message_is_refused(
    endpoint: Endpoint,
) -> None:
    endpoint.daemon.result("agent.update", {"agent": "ada", "requires_approval": ["bash"]})
    client = endpoint.client()
    raw = client.chat.completions.with_raw_response.create(
        model="ada", messages=ask("run `echo hi`")
    )
    completion = raw.parse()

    (waiting,) = endpoint.daemon.result("approval.list", {"agent": "ada"})["approvals"]
    short = waiting["id"][-8:]
    content = completion.choices[0].message.content or ""
    assert content.startswith('[agentd] bash({"command": "echo hi"}) as approval ')
    assert f"`agentctl approve {short}`" in content
    assert completion.choices[0].finish_reason == "stop"
    extra = (completion.model_extra or {})["agentd"]
    assert extra["stop_reason"] == "requires_approval"
    assert [a["id"] for a in extra["approvals"]] == [waiting["id"]]

    with pytest.raises(openai.ConflictError) as caught:
        client.chat.completions.create(model="ada", messages=ask("still there?"))
    assert caught.value.code == "approval_pending"
    assert caught.value.response.headers["x-should-retry"] == "false"
    conversation = raw.headers["X-Agentd-Conversation"]
    assert "still there?" not in [m["content"] for m in endpoint.messages(conversation)]


def test_the_endpoint_is_off_with_the_web_view(daemon: DaemonRunner) -> None:
    daemon.start()
    created = daemon.result("apikey.create", {"name": "early"})

    assert created["endpoint"] is None
    assert daemon.daemon.web.api_base is None  # type: ignore[union-attr]
    assert os.environ.get("AGENTD_WEB") is None


def test_the_endpoints_requests_keep_the_daemon_from_collecting_as_if_it_were_quiet(
    endpoint: Endpoint,
) -> None:
    """A full collection holds the loop; the daemon starts one only when no request runs,
    and the web view's requests are requests too (20 streaming clients once looked quiet)."""
    collection = endpoint.daemon.daemon.quiet_collection  # type: ignore[union-attr]
    before = collection.started_elsewhere()

    endpoint.client().chat.completions.create(model="ada", messages=ask("hello"))
    endpoint.client().models.list()

    assert collection.started_elsewhere() == before + 2
    assert collection.in_flight() == 0
