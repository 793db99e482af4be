"""The persisted recall index: a restart opens what was written and reads only the rest of
the logs; whatever on disk cannot be trusted is read again from the logs, never lost."""

from __future__ import annotations

import asyncio
import errno
import json
import threading
from pathlib import Path

import pytest

from agentd import recall
from agentd.recall import RecallService
from shared.ids import new_id
from shared.models.messages import Message
from shared.recall import persisted
from shared.recall.disk import write_segment
from shared.recall.documents import read_documents
from shared.recall.index import AgentIndex
from shared.recall.manifest import SegmentEntry, read_manifest, write_manifest
from shared.recall.ranking import SearchRequest
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.daemon import DaemonRunner

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
    return RecallService(layout, open_segment_docs=4, segment_capacity=32)


def _opened(service: RecallService) -> None:
    service.start([AGENT]).join(30)
    service.wait_for_writes()


def _ranked(hits: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Hits best first, to 1e-9 (ties, which float rounding may order either way, by id)."""
    return sorted(((i, round(score, 9)) for i, score in hits), key=lambda h: (-h[1], h[0]))


def _search(service: RecallService, query: str) -> list[tuple[str, float]]:
    found = asyncio.run(service.search(AGENT, SearchRequest(query, limit=1000)))
    return _ranked([(hit.message_id, hit.score) for hit in found.hits])


def _fresh(layout: Layout, query: str) -> list[tuple[str, float]]:
    """What an index built from the logs as they are now answers."""
    index = AgentIndex()
    for directory in sorted(layout.conversations_dir(AGENT).iterdir()):
        index.build(read_documents(layout.conversation_files(AGENT, directory.name).messages))
    ranked = index.search(SearchRequest(query, limit=1000))
    return _ranked([(index.message_id(n), score) for n, score in ranked])


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


def test_a_restart_searches_the_persisted_segments_and_reads_only_the_tail(
    layout: Layout, conversations: list[Conversation]
) -> None:
    first = _service(layout)
    _opened(first)
    expected = {query: _search(first, query) for query in QUERIES}
    assert read_manifest(layout.recall_files(AGENT).manifest).segments
    for conversation in conversations:  # what is persisted can no longer be read again
        _every_line_blanked_but_the_last(conversation.log.path)
    _say(conversations[0], 500, 3)  # the tail, written after the last segment

    second = _service(layout)
    _opened(second)

    for query in QUERIES:  # every persisted hit is still found, though its line is blank
        found = {message_id for message_id, _ in _search(second, query)}
        assert found >= {message_id for message_id, _ in expected[query]}
    assert len(_search(second, "unique500 unique501 unique502")) == 3
    assert second.status(AGENT)["state"] == "ready"


def test_results_after_restarts_and_appends_are_the_in_memory_index_s(
    layout: Layout, conversations: list[Conversation]
) -> None:
    service = _service(layout)
    _opened(service)
    for round_ in range(3):
        service = _service(layout)
        _opened(service)
        for n, conversation in enumerate(conversations):
            messages = [_message(conversation, f"apple word{k} more{round_}") for k in range(5 + n)]
            offsets = conversation.log.append(messages)
            service.on_append(conversation, messages, offsets)
        service.wait_for_writes()
    service = _service(layout)
    _opened(service)

    for query in QUERIES:
        assert _search(service, query) == _fresh(layout, query)
    entries = read_manifest(layout.recall_files(AGENT).manifest).segments
    assert sum(entry.documents for entry in entries) == 33 + 3 * 11
    assert len(entries) < 8 + 3  # merged in the background, not one file per freeze


def _restarted_when(layout: Layout, damage: object) -> RecallService:
    service = _service(layout)
    _opened(service)
    damage()  # type: ignore[operator]
    again = _service(layout)
    _opened(again)
    return again


def _segment_files(layout: Layout) -> list[Path]:
    return sorted(layout.recall_files(AGENT).directory.glob("*.seg"))


@pytest.mark.parametrize("where", ["header", "body", "missing"])
def test_a_damaged_or_missing_segment_is_read_again_from_the_logs(
    layout: Layout, conversations: list[Conversation], where: str
) -> None:
    def damage() -> None:
        path = _segment_files(layout)[0]
        if where == "missing":
            path.unlink()
            return
        data = bytearray(path.read_bytes())
        data[40 if where == "header" else len(data) - 3] ^= 0xFF
        path.write_bytes(bytes(data))

    service = _restarted_when(layout, damage)  # a damaged body is found after the opening

    for query in QUERIES:
        assert _search(service, query) == _fresh(layout, query)
    assert service.status(AGENT)["state"] == "ready"


def test_a_small_agent_with_no_index_on_disk_is_searchable_whole_at_once(
    layout: Layout, conversations: list[Conversation], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent just imported has logs and no index: its first search, asked the moment it
    is started, finds everything rather than an empty "rebuilding" answer."""
    background = threading.Event()

    def background_work_waits() -> None:  # the build's background part, held back
        if threading.current_thread().name == "recall-build":
            background.wait(30)

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


def test_a_segment_of_another_analyzer_is_rebuilt_and_says_why(
    layout: Layout, conversations: list[Conversation], monkeypatch: pytest.MonkeyPatch
) -> None:
    # logs over the bound: not counted, rebuilt in the background (as a big agent's are)
    monkeypatch.setattr(recall, "COUNT_AT_OPEN_BYTES", 0)

    def other_analyzer() -> None:
        path = layout.recall_files(AGENT).manifest
        manifest = read_manifest(path)
        manifest.analyzer_version -= 1
        write_manifest(path, manifest)

    service = _service(layout)
    _opened(service)
    other_analyzer()
    again = _service(layout)
    states = []
    again._agents.clear()
    state = again._new_state(AGENT)
    again._agents[AGENT] = state
    again._open(AGENT, state)
    states.append(state.state())
    again._catch_up(state)

    assert states == ["rebuilding: analyzer changed"]
    state.ready.set()
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

    for query in QUERIES:
        assert _search(service, query) == _fresh(layout, query)


def test_leftovers_of_a_write_cut_short_are_removed(
    layout: Layout, conversations: list[Conversation]
) -> None:
    directory = layout.recall_files(AGENT).directory

    def crash_leftovers() -> None:
        (directory / ".00000099.seg.tmp").write_bytes(b"half a segment")
        (directory / "00000099.seg").write_bytes(b"never named by the manifest")

    service = _restarted_when(layout, crash_leftovers)

    assert not (directory / ".00000099.seg.tmp").exists()
    assert not (directory / "00000099.seg").exists()
    assert _search(service, "apple") == _fresh(layout, "apple")


def test_status_counts_the_bytes_on_disk(layout: Layout, conversations: list[Conversation]) -> None:
    service = _service(layout)
    _opened(service)
    files = list(layout.recall_files(AGENT).directory.iterdir())
    status = service.status(AGENT)
    assert status == {"state": "ready", "bytes_on_disk": sum(f.stat().st_size for f in files)}
    assert json.loads(layout.recall_files(AGENT).manifest.read_text())["segments"]


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

    before = _bytes_read()
    around = asyncio.run(service.around(AGENT, target.id, 2, 3))
    read = _bytes_read() - before

    assert [m.content.split()[-1] for m in around] == [f"unique{n}" for n in range(2998, 3004)]
    assert read < conversations[0].log.path.stat().st_size // 10


def test_agentctl_status_shows_the_index_state_and_its_size(daemon: DaemonRunner) -> None:
    daemon.start()
    daemon.result("chat", {"text": "apple banana"})

    (agent,) = daemon.result("status")["agents"]

    assert agent["recall"]["state"] == "ready"
    assert agent["recall"]["bytes_on_disk"] >= 0


def test_an_orderly_stop_writes_the_open_segment_so_a_restart_reads_no_tail(
    daemon: DaemonRunner, agentd_home: Path
) -> None:
    daemon.start()
    for text in ("apple banana", "cherry 数据库端口"):
        daemon.result("chat", {"text": text})
    (agent,) = daemon.result("status")["agents"]
    layout = Layout(agentd_home)
    conversation_ids = [d.name for d in layout.conversations_dir(agent["id"]).iterdir()]

    daemon.stop()  # four messages: far fewer than a segment holds, so none was frozen

    manifest = read_manifest(layout.recall_files(agent["id"]).manifest)
    assert manifest is not None
    assert sum(entry.documents for entry in manifest.segments) == 4
    (log_path,) = [layout.conversation_files(agent["id"], c).messages for c in conversation_ids]
    last_offset = log_path.stat().st_size - len(log_path.read_bytes().splitlines()[-1]) - 1
    (covers,) = [entry.covers for entry in manifest.segments]
    assert [last for _, last, _ in covers.values()] == [last_offset]


def test_a_segment_write_that_fails_loses_nothing_though_its_neighbours_are_merged(
    layout: Layout, conversations: list[Conversation], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk is full for one write: the segments written before and after it are then
    merged, and the merged one must not claim the lines of the one never written."""
    service = _service(layout)
    _opened(service)
    writes = []

    def full_once(path: Path, *args: object, **kwargs: object) -> tuple[int, int]:
        writes.append(path)
        if len(writes) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write_segment(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(persisted, "write_segment", full_once)
    for k in range(14):  # segments of four, the third not written
        messages = [_message(conversations[1], f"apple word{n % 11} late{k}") for n in range(4)]
        service.on_append(conversations[1], messages, conversations[1].log.append(messages))
    service.wait_for_writes()
    merged = read_manifest(layout.recall_files(AGENT).manifest).segments[1:]  # [0]: the build's
    assert any(entry.documents > 8 for entry in merged)

    again = _service(layout)
    _opened(again)

    every_message = " ".join(f"word{n}" for n in range(11))
    found = [message_id for message_id, _ in _search(again, every_message)]
    assert len(found) == len(set(found)) == 33 + 56
    for query in (*QUERIES, every_message):
        assert _search(again, query) == _fresh(layout, query)


def _tell(service: RecallService | None, conversation: Conversation, k: int) -> None:
    """Four messages appended to the conversation's log, and indexed if a service runs."""
    messages = [_message(conversation, f"apple word{n % 11} batch{k}") for n in range(4)]
    offsets = conversation.log.append(messages)
    if service is not None:
        service.on_append(conversation, messages, offsets)


def test_a_segment_claiming_past_a_gap_is_read_again_with_a_neighbour_dropped_later(
    layout: Layout, conversations: list[Conversation]
) -> None:
    """A start reads a dropped segment's lines and the log's tail into one new segment,
    whose claim then spans the segment between them; when that one is dropped in turn,
    its lines must still be read again."""
    first = _service(layout)
    _opened(first)
    for k in range(3):  # three small segments of the second conversation alone
        _tell(first, conversations[1], k)
    first.write_open_segments()

    def small_segments() -> list[SegmentEntry]:
        entries = read_manifest(layout.recall_files(AGENT).manifest).segments
        return [e for e in entries if list(e.covers) == [conversations[1].id]]

    middle, after = small_segments()[-2:]
    layout.recall_files(AGENT).segment(middle.serial).unlink()
    _tell(None, conversations[1], 3)  # written while the daemon was down: a tail
    second = _service(layout)
    _opened(second)
    second.write_open_segments()
    layout.recall_files(AGENT).segment(after.serial).unlink()

    third = _service(layout)
    _opened(third)

    every_message = " ".join(f"word{n}" for n in range(11))
    found = [message_id for message_id, _ in _search(third, every_message)]
    assert len(found) == len(set(found)) == 20 + 13 + 16
    for query in (*QUERIES, every_message):
        assert _search(third, query) == _fresh(layout, query)
