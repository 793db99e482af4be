"""The persisted recall index: a restart opens what was written and reads only the rest of
the logs; whatever on disk cannot be trusted is read again from the logs, never lost."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from agentd.recall import service as recall
from agentd.recall.service import RecallService
from shared.ids import new_id
from shared.models.messages import Message
from shared.recall.documents import read_documents
from shared.recall.index import AgentIndex
from shared.recall.ranking import SearchRequest
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner
from tests.support.recall_oracle import scratch_index
from tests.support.waiting import ceiling, wait_for

AGENT = "a"
QUERIES = ("apple", "banana cherry", "word7", '"apple banana"', "数据库", "端口 word3")


def _message(conversation: Conversation, text: str, role: str = "user") -> Message:
    return Message.of(
        id=new_id("msg"),
        agent_id=AGENT,
        conversation_id=conversation.id,
        role=role,
        content=text,
    )


def _say(conversation: Conversation, start: int, count: int) -> None:
    words = ("apple", "banana", "cherry", "数据库端口", "端口")
    conversation.append(
        [
            _message(
                conversation,
                f"{words[n % 5]} {words[(n * 3) % 5]} word{n % 11} unique{n}",
                "user" if n % 2 else "assistant",
            )
            for n in range(start, start + count)
        ]
    )


def _service(layout: Layout) -> RecallService:
    return RecallService(layout)


def _append(service: RecallService, conversation: Conversation, messages: list[Message]) -> None:
    """Append to the log and tell the service, as the daemon's recall client does."""
    offsets = conversation.log.append(messages)
    fields = [message.model_dump(mode="json") for message in messages]
    service.appended(AGENT, conversation.id, fields, offsets)


def _opened(service: RecallService) -> None:
    service.start([AGENT]).join(ceiling(30))
    service.wait_for_writes()


def _ranked(hits: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Hits best first, to 1e-5 (ties, which float rounding may order either way, by id)."""
    return sorted(((i, round(score, 5)) for i, score in hits), key=lambda h: (-h[1], h[0]))


def _search(service: RecallService, query: str) -> list[tuple[str, float]]:
    found = asyncio.run(service.search(AGENT, SearchRequest(query, limit=1000)))
    return _ranked([(hit.message_id, hit.score) for hit in found.hits])


def _fresh(layout: Layout, query: str) -> list[tuple[str, float]]:
    """What a scratch index built from the logs as they are now answers."""
    index = scratch_index()
    ids = {}
    for directory in sorted(layout.conversations_dir(AGENT).iterdir()):
        documents = list(read_documents(layout.conversation_files(AGENT, directory.name).messages))
        ids.update({(directory.name, d.offset): d.message_id for d in documents})
        index.build(documents)
    index.know(directory.name for directory in layout.conversations_dir(AGENT).iterdir())
    ranked = index.search(SearchRequest(query, limit=1000))
    return _ranked(
        [(ids[index.conversation_id(hit.conversation), hit.offset], hit.score) for hit in ranked]
    )


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.fixture
def conversations(layout: Layout) -> list[Conversation]:
    found = [Conversation.create(layout, AGENT, memory_head=None) for _ in range(2)]
    _say(found[0], 0, 20)
    _say(found[1], 100, 13)
    return found


def _every_line_blanked_but_the_last(path: Path) -> None:
    """Make every line but the last unreadable (same length): a log read again loses them."""
    lines = path.read_bytes().splitlines(keepends=True)
    blank = [b" " * (len(line) - 1) + b"\n" for line in lines[:-1]]
    path.write_bytes(b"".join(blank) + lines[-1])


def test_a_restart_searches_the_persisted_index_and_reads_only_the_tail(
    layout: Layout, conversations: list[Conversation]
) -> None:
    first = _service(layout)
    _opened(first)
    expected = {query: _search(first, query) for query in QUERIES}
    assert json.loads(layout.recall_files(AGENT).format.read_text())["engine"] == "tantivy"
    first.flush()
    for conversation in conversations:  # what is persisted can no longer be read again
        _every_line_blanked_but_the_last(conversation.log.path)
    _say(conversations[0], 500, 3)  # the tail, written after the index was

    second = _service(layout)
    _opened(second)

    index = second._agents[AGENT].index
    assert index is not None
    for query in QUERIES:  # every persisted hit is still in the index (its line is blank:
        # a search now skips it, the log being the truth)
        assert len(index.search(SearchRequest(query, limit=1000))) >= len(expected[query])
    assert len(_search(second, "unique500 unique501 unique502")) == 3
    assert second.status(AGENT)["state"] == "ready"


class _FlushWatched(threading.Event):
    """An index's ``searchable`` event that tells when a flush starts waiting on it."""

    def __init__(self, flush_waits: threading.Event) -> None:
        super().__init__()
        self.flush_waits = flush_waits

    def wait(self, timeout: float | None = None) -> bool:
        self.flush_waits.set()
        return super().wait(timeout)


def test_a_flush_right_after_the_start_commits_the_index_it_was_still_opening(
    layout: Layout, conversations: list[Conversation], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An orderly stop that comes while the index still opens (a daemon stopped right
    after its start) waits for the opening, which reads the logs, and commits what it
    read: the next start reads nothing again. The opening here is held until the flush
    waits for it, or for ten seconds if it never does."""
    flush_waits = threading.Event()
    first = _service(layout)
    new_state = first._new_state

    def watched(agent_id: str) -> Any:
        state = new_state(agent_id)
        state.searchable = _FlushWatched(flush_waits)
        return state

    def held_opened(*args: Any) -> Any:
        flush_waits.wait(ceiling(10))
        return opened(*args)

    opened = recall.opened
    monkeypatch.setattr(first, "_new_state", watched)
    monkeypatch.setattr(recall, "opened", held_opened)
    first.start([AGENT])

    assert first.flush()
    monkeypatch.undo()
    for conversation in conversations:  # what is persisted can no longer be read again
        _every_line_blanked_but_the_last(conversation.log.path)

    second = _service(layout)
    _opened(second)
    index = second._agents[AGENT].index
    assert index is not None and len(index) == 20 + 13  # from disk: the logs are blank now


def test_results_after_restarts_and_appends_are_the_in_memory_index_s(
    layout: Layout, conversations: list[Conversation]
) -> None:
    service = _service(layout)
    _opened(service)
    for round_ in range(3):
        service = _service(layout)
        _opened(service)
        for n, conversation in enumerate(conversations):
            _append(
                service,
                conversation,
                [_message(conversation, f"apple word{k} more{round_}") for k in range(5 + n)],
            )
        service.flush()
    service = _service(layout)
    _opened(service)

    for query in QUERIES:
        assert _search(service, query) == _fresh(layout, query)
    every_message = " ".join(f"word{n}" for n in range(11))
    found = [message_id for message_id, _ in _search(service, every_message)]
    assert len(found) == len(set(found)) == 33 + 3 * 11


def _restarted_when(layout: Layout, damage: object) -> RecallService:
    service = _service(layout)
    _opened(service)
    service.flush()
    damage()  # type: ignore[operator]
    again = _service(layout)
    _opened(again)
    return again


@pytest.mark.parametrize("where", ["meta", "segment missing", "format"])
def test_a_damaged_or_missing_index_file_has_the_index_rebuilt_from_the_logs(
    layout: Layout, conversations: list[Conversation], where: str
) -> None:
    directory = layout.recall_files(AGENT).directory

    def damage() -> None:
        if where == "meta":
            (directory / "meta.json").write_text("{not json")
        elif where == "segment missing":
            next(directory.glob("*.idx")).unlink()
        else:
            layout.recall_files(AGENT).format.write_text("garbage")

    service = _restarted_when(layout, damage)

    for query in QUERIES:
        assert _search(service, query) == _fresh(layout, query)
    assert service.status(AGENT)["state"] == "ready"


def test_an_index_of_the_previous_format_is_removed_and_rebuilt(
    layout: Layout, conversations: list[Conversation]
) -> None:
    """Issue 13's segments (``manifest.json``, ``00000000.seg``) are left by an upgrade."""
    directory = layout.recall_files(AGENT).directory
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text('{"format_version": 2, "segments": []}')
    (directory / "00000000.seg").write_bytes(b"AGDRECL\x00 old segment")

    service = _service(layout)
    _opened(service)

    assert not (directory / "manifest.json").exists()
    assert not (directory / "00000000.seg").exists()
    for query in QUERIES:
        assert _search(service, query) == _fresh(layout, query)


def test_a_small_agent_with_no_index_on_disk_is_searchable_whole_at_once(
    layout: Layout, conversations: list[Conversation], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent just imported has logs and no index: its first search, asked the moment it
    is started, finds everything rather than an empty "rebuilding" answer."""
    background = threading.Event()

    def background_work_waits() -> None:  # the build's background part, held back
        if threading.current_thread().name == "recall-build":
            background.wait(ceiling(30))

    service = _service(layout)
    monkeypatch.setattr(recall, "lower_this_thread", background_work_waits)
    service.start([AGENT])
    try:
        found = asyncio.run(service.search(AGENT, SearchRequest("数据库", limit=1000)))
        state = service.status(AGENT)["state"]
    finally:
        background.set()

    assert found.incomplete is None
    assert _ranked([(hit.message_id, hit.score) for hit in found.hits]) == _fresh(layout, "数据库")
    assert state == "ready"


@pytest.mark.parametrize(
    ("stale", "why"), [("analyzer", "analyzer changed"), ("schema", "format changed")]
)
def test_an_index_of_another_analyzer_or_schema_is_rebuilt_and_says_why(
    layout: Layout,
    conversations: list[Conversation],
    monkeypatch: pytest.MonkeyPatch,
    stale: str,
    why: str,
) -> None:
    # logs over the bound: not counted, rebuilt in the background (as a big agent's are)
    monkeypatch.setattr(recall, "COUNT_AT_OPEN_BYTES", 0)

    def other_analyzer() -> None:
        path = layout.recall_files(AGENT).format
        found = json.loads(path.read_text())
        if stale == "analyzer":
            found["analyzer"] -= 1
        else:  # the first tantivy index's format.json said no schema (seq and offset)
            del found["schema"]
        path.write_text(json.dumps(found))

    service = _service(layout)
    _opened(service)
    service.flush()
    other_analyzer()
    again = _service(layout)
    state = again._new_state(AGENT)
    again._agents[AGENT] = state
    again._open(AGENT, state)
    seen = state.state()
    again._catch_up(state)
    again._finish(state)

    assert seen == f"rebuilding: {why}"
    for query in QUERIES:
        assert _search(again, query) == _fresh(layout, query)


@pytest.mark.parametrize("change", ["truncated", "replaced", "deleted"])
def test_a_conversation_log_truncated_or_replaced_invalidates_what_covers_it(
    layout: Layout, conversations: list[Conversation], change: str
) -> None:
    path = conversations[0].log.path

    def rewrite() -> None:
        lines = path.read_bytes().splitlines(keepends=True)
        if change == "truncated":
            path.write_bytes(b"".join(lines[:5]))
        elif change == "replaced":
            path.unlink()
            _say(conversations[0], 900, 30)
        else:
            path.unlink()

    service = _restarted_when(layout, rewrite)

    for query in QUERIES:  # the same messages (not the same scores: tantivy counts a
        # deleted message in its statistics until the segment holding it is merged)
        found = [message_id for message_id, _ in _search(service, query)]
        assert sorted(found) == sorted(message_id for message_id, _ in _fresh(layout, query))


def test_an_agent_deleted_while_its_index_opens_does_not_come_back(
    layout: Layout, conversations: list[Conversation]
) -> None:
    """A deletion moves the agent's directory to the trash, then has recall drop the
    agent. A recall process still opening that agent's index in between (one just
    started, say) must not make the directory again, holding only an index."""
    agent_dir = layout.agent_dir(AGENT)
    trashed = layout.home / "trashed-agent"
    agent_dir.rename(trashed)

    service = _service(layout)
    _opened(service)

    assert not agent_dir.exists()
    assert not (trashed / "recall").exists()
    service.drop(AGENT)
    assert service.wait_for_writes(ceiling(30))
    assert not agent_dir.exists()


def test_status_counts_the_bytes_on_disk(layout: Layout, conversations: list[Conversation]) -> None:
    service = _service(layout)
    _opened(service)
    service.flush()
    files = list(layout.recall_files(AGENT).directory.iterdir())
    status = service.status(AGENT)
    assert status == {"state": "ready", "bytes_on_disk": sum(f.stat().st_size for f in files)}
    assert status["bytes_on_disk"] > 0


def _bytes_read() -> int:
    """Bytes this process has read through ``read``-like system calls so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_messages_around_reads_only_the_lines_it_returns(
    layout: Layout, conversations: list[Conversation]
) -> None:
    _say(conversations[0], 1000, 4000)  # a log of about 400 kB
    service = _service(layout)
    _opened(service)
    target = next(m for m in conversations[0].log if m.content.endswith(" unique3000"))
    asyncio.run(service.around(AGENT, target.id, 1, 1))  # warm up (imports, the loop)

    reads = []
    for _ in range(3):  # the fewest bytes of three: another thread of this process reads too
        before = _bytes_read()
        around = asyncio.run(service.around(AGENT, target.id, 2, 3))
        reads.append(_bytes_read() - before)

    texts = [Message.parse_line(line).content for line in around]
    assert [text.split()[-1] for text in texts] == [f"unique{n}" for n in range(2998, 3004)]
    assert min(reads) < conversations[0].log.path.stat().st_size // 10


def test_agentctl_status_shows_the_index_state_and_its_size(daemon: DaemonRunner) -> None:
    daemon.start()
    daemon.result("chat", {"text": "apple banana"})

    def recall_state() -> dict[str, Any]:
        (agent,) = daemon.result("status")["agents"]
        return agent["recall"]

    assert recall_state()["state"] in ("opening", "ready")  # a snapshot: it may still open
    ready = wait_for(lambda: (s := recall_state())["state"] == "ready" and s, "a ready index")
    assert ready["bytes_on_disk"] >= 0


def test_an_orderly_stop_commits_everything_so_a_restart_reads_no_tail(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    for text in ("apple banana", "cherry 数据库端口"):
        daemon.result("chat", {"text": text})
    (agent,) = daemon.result("status")["agents"]
    layout = Layout(agentd_home)
    (conversation_id,) = [d.name for d in layout.conversations_dir(agent["id"]).iterdir()]

    daemon.stop()

    index = AgentIndex(layout.recall_files(agent["id"]).directory)
    log_path = layout.conversation_files(agent["id"], conversation_id).messages
    last_offset = log_path.stat().st_size - len(log_path.read_bytes().splitlines()[-1]) - 1
    tail = index.tail(conversation_id)
    assert tail is not None and (tail.seq, tail.offset) == (3, last_offset)
