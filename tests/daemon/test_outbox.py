"""The daemon's reflection queue: requests on disk first; one sent and one pending per agent;
a trigger during a run is never swallowed; nothing joined is ever sent; what Redis lost is
sent again at once; a damaged entry harms only itself. Real Valkey, no worker: a job is
"run" by handing the daemon its outcome, as settling the worker's answer would."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentd.reflection.reflections import Reflections
from shared.coordination import jobs, redis_keys
from shared.coordination.broker import locate
from shared.coordination.jobs import JobState
from shared.memory.repo import MemoryRepo
from shared.models.agents import AgentRecord
from shared.models.reflection import ReflectionOutcome, ReflectionRequest
from shared.providers.mock_reflector import MockReflector
from shared.reflection import events
from shared.reflection.policy import ReflectionOverrides
from shared.reflection.state import record_turn
from shared.settings import Settings
from shared.store.agents import AgentStore
from shared.store.conversations import Conversation
from shared.store.layout import Layout
from tests.support.reflection import work_sent_job
from tests.support.transcripts import say
from tests.support.waiting import ceiling, wait_until
from tests.support.workers import RedisForTests


@pytest.fixture
def agent(agentd_home: Path) -> AgentRecord:
    record = AgentRecord(
        id="agent-1",
        name="ada",
        model="mock",
        system_prompt="You help.",
        reflection=ReflectionOverrides(trigger="step-count", step_count=1),
    )
    Layout(agentd_home).agent_dir(record.id).mkdir(parents=True)
    AgentStore(Layout(agentd_home)).save(record)
    MemoryRepo.create(
        Layout(agentd_home).memory_dir(record.id),
        agent_id=record.id,
        agent_name=record.name,
        persona="I help.",
        human="",
    ).close()
    return record


@pytest.fixture
def reflections(agentd_home: Path) -> Reflections:
    return _reflections(agentd_home)


@pytest.fixture
def chat(agentd_home: Path, agent: AgentRecord) -> Conversation:
    return _chat(agentd_home, agent)


async def _send(
    reflections: Reflections, chat: Conversation, trigger: str = "step-count"
) -> ReflectionRequest:
    """Record a request for ``chat`` and send it: the agent's running reflection."""
    request = reflections.outbox.submit(chat.agent_id, trigger, [chat.id])  # type: ignore[arg-type]
    assert await reflections.dispatch(chat.agent_id) == request
    return request


LEASE_S = 3
"""The lease's TTL in these tests, and so the grace a queued job has to show its lease."""


def _reflections(home: Path) -> Reflections:
    settings = Settings(home=home, reflection_lease_s=LEASE_S)
    layout = Layout(home)
    return Reflections(settings, layout, locate(settings), AgentStore(layout))


def _chat(home: Path, agent: AgentRecord, turns: int = 1) -> Conversation:
    chat = Conversation.create(Layout(home), agent.id, memory_head=None)
    for n in range(turns):
        say(chat, "user", f"I always want {n}")
        say(chat, "assistant", "ok")
    record_turn(chat.directory, turns)
    return chat


def _queued_jobs(redis_server: RedisForTests) -> list[str]:
    """Task ids of the jobs waiting in the Celery queue, oldest first."""
    messages = redis_server.client.lrange(redis_keys.REFLECTION_QUEUE, 0, -1)
    return [json.loads(m)["headers"]["id"] for m in reversed(messages)]


def _outcome(
    request: ReflectionRequest, status: str = "merged", **fields: object
) -> ReflectionOutcome:
    return ReflectionOutcome(
        reflection_id="r",
        request_id=request.request_id,
        agent_id=request.agent_id,
        conversation_ids=request.conversation_ids,
        trigger=request.trigger,
        status=status,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


def test_a_trigger_during_a_run_waits_as_the_pending_request_and_runs_when_it_ends(
    agentd_home: Path, agent: AgentRecord, redis_server: RedisForTests
) -> None:
    reflections = _reflections(agentd_home)
    first, second = _chat(agentd_home, agent), _chat(agentd_home, agent)

    async def scenario() -> None:
        running = reflections.outbox.submit(agent.id, "step-count", [first.id])
        assert await reflections.dispatch(agent.id) == running
        later = [
            reflections.outbox.submit(agent.id, "step-count", [first.id]),
            reflections.outbox.submit(agent.id, "compaction-event", [second.id]),
            reflections.outbox.submit(agent.id, "step-count", [first.id]),
        ]
        assert await reflections.dispatch(agent.id) is None  # one at a time
        (pending,) = {request.request_id for request in later}
        assert _queued_jobs(redis_server) == [running.request_id]

        await reflections._on_outcome(_outcome(running))

        assert _queued_jobs(redis_server) == [running.request_id, pending]
        (entry,) = reflections.outbox.entries(agent.id)
        assert (entry.state, entry.request.trigger) == ("sent", "compaction-event")
        assert entry.request.conversation_ids == [first.id, second.id]

    asyncio.run(scenario())


def test_a_broker_stalled_as_by_a_busy_disk_still_takes_the_request(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """Valkey holds its replies for up to 2 s while a busy disk finishes an fsync: that is
    a slow broker, not an unreachable one (CI saw a 0.5 s timeout call it down)."""
    request = reflections.outbox.submit(agent.id, "step-count", [chat.id])
    valkey = redis_server.server.process
    assert valkey is not None
    valkey.send_signal(signal.SIGSTOP)  # stalled, as behind a disk that is slow to fsync
    resume = threading.Timer(1.5, valkey.send_signal, args=(signal.SIGCONT,))
    resume.start()
    try:
        sent = asyncio.run(reflections.dispatch(agent.id))
    finally:
        resume.join(ceiling(30))

    assert sent == request
    assert _queued_jobs(redis_server) == [request.request_id]
    assert not reflections.outbox.broker_down


def test_a_manual_request_joins_the_pending_one_and_its_waiter_hears_that_outcome(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:

    async def scenario() -> None:
        running = await _send(reflections, chat)
        auto = reflections.outbox.submit(agent.id, "step-count", [chat.id])
        manual, reachable = await reflections.request_manual(
            agent, [chat.id], recent=None, instruction="only names"
        )
        assert reachable and manual.request_id == auto.request_id
        assert (manual.trigger, manual.instruction) == ("manual", "only names")
        waiting = asyncio.create_task(reflections.wait(manual.request_id, 10))

        await reflections._on_outcome(_outcome(running))
        await reflections._on_outcome(_outcome(manual, "no_changes"))

        assert (await waiting).status == "no_changes"  # type: ignore[union-attr]
        assert reflections.outbox.entries(agent.id) == []
        assert _queued_jobs(redis_server) == [running.request_id, manual.request_id]

    asyncio.run(scenario())


def test_a_pending_step_count_request_is_dropped_when_the_run_before_covered_its_steps(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    state_file = chat.directory / "reflection-state.json"

    async def scenario() -> None:
        running = await _send(reflections, chat)
        reflections.outbox.submit(agent.id, "step-count", [chat.id])
        state = json.loads(state_file.read_text())
        state["reflected_completed_steps"] = state["total_completed_steps"]  # the run read it
        state_file.write_text(json.dumps(state))

        await reflections._on_outcome(_outcome(running))

        assert reflections.outbox.entries(agent.id) == []
        assert _queued_jobs(redis_server) == [running.request_id]

    asyncio.run(scenario())


def test_a_consumed_outcome_with_unread_messages_asks_for_the_next_job_at_once(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:

    async def scenario() -> None:
        running = await _send(reflections, chat, "manual")

        await reflections._on_outcome(_outcome(running, "no_changes", unread=[chat.id]))

        (entry,) = reflections.outbox.entries(agent.id)
        assert (entry.state, entry.request.conversation_ids) == ("sent", [chat.id])
        assert _queued_jobs(redis_server)[-1] == entry.request.request_id

    asyncio.run(scenario())


def test_a_busy_skip_settles_nothing_and_the_job_is_not_sent_while_its_copy_runs(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """``already_active``: a copy of the job holds the agent. Its outcome is still to
    come; sending again now would only make another busy skip."""
    client = redis_server.client

    async def scenario() -> None:
        running = await _send(reflections, chat)
        client.delete(redis_keys.REFLECTION_QUEUE)  # the copy took the message and runs
        started = JobState(state="running", at=time.time() - LEASE_S - 1)
        client.set(redis_keys.job_state(running.request_id), started.model_dump_json())
        client.set(redis_keys.lease(agent.id), f"{running.request_id} elsewhere 1")

        await reflections._on_outcome(_outcome(running, "skipped", reason="already_active"))
        await reflections.reconcile()

        (entry,) = reflections.outbox.entries(agent.id)
        assert (entry.request.request_id, entry.state) == (running.request_id, "sent")
        assert _queued_jobs(redis_server) == []

    asyncio.run(scenario())


def test_a_sent_job_redis_no_longer_knows_is_sent_again_at_the_first_reconcile(
    agentd_home: Path,
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """The crash of everything with a Redis that lost its data: the entry says "sent",
    Redis knows nothing; the daemon's first pass sends it again, not 15 minutes later."""

    async def scenario() -> None:
        running = await _send(reflections, chat)
        redis_server.client.flushall()

        await _reflections(agentd_home).reconcile()  # a new daemon

        assert _queued_jobs(redis_server) == [running.request_id]
        assert jobs.status(redis_server.client, running.request_id, agent.id, LEASE_S) == "queued"

    asyncio.run(scenario())


def test_a_job_that_finished_before_redis_lost_its_data_is_settled_from_the_log(
    agentd_home: Path,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """The job merged and wrote its outcome to disk; then Redis lost everything (and the
    stream entry went with it). Sending it again would only waste a run: the log says."""

    async def scenario() -> None:
        running = await _send(reflections, chat)
        finished = _outcome(running)
        events.append(Layout(agentd_home).reflections_dir(chat.agent_id), finished)
        redis_server.client.flushall()
        waiting = asyncio.create_task(reflections.wait(running.request_id, 10))

        await reflections.reconcile()

        assert await waiting == finished
        assert reflections.outbox.entries(chat.agent_id) == []
        assert _queued_jobs(redis_server) == []

    asyncio.run(scenario())


def test_a_running_job_whose_lease_holder_died_is_sent_again_at_once(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """The worker running the job died (its pool process, the whole worker, or its host):
    marked running, its lease's holder dead, the queue empty. Only the lease decides: a
    job whose holder lives is never sent again, however long ago it was sent (its worker's
    time limit bounds it)."""
    client = redis_server.client
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "30"])

    async def scenario() -> None:
        running = await _send(reflections, chat)
        client.delete(redis_keys.REFLECTION_QUEUE)  # a worker took it and started it
        started = JobState(state="running", at=time.time()).model_dump_json()
        client.set(redis_keys.job_state(running.request_id), started)
        client.set(
            redis_keys.lease(agent.id), f"{running.request_id} {socket.gethostname()} {live.pid}"
        )
        (entry,) = reflections.outbox.entries(agent.id)
        entry.sent_at = time.time() - 7 * 24 * 3600  # sent a week ago
        reflections.outbox.save(entry)
        await reflections.reconcile()
        assert _queued_jobs(redis_server) == []  # its holder lives: it is running

        client.set(
            redis_keys.lease(agent.id), f"{running.request_id} {socket.gethostname()} {dead.pid}"
        )
        await reflections.reconcile()
        assert _queued_jobs(redis_server) == [running.request_id]

    try:
        asyncio.run(scenario())
    finally:
        live.kill()
        live.wait()


def test_a_queued_job_that_never_got_going_is_sent_again_after_a_grace(
    redis_server: RedisForTests, reflections: Reflections, chat: Conversation
) -> None:
    client = redis_server.client

    async def scenario() -> None:
        queued = await _send(reflections, chat)
        client.delete(redis_keys.REFLECTION_QUEUE)  # taken by a worker, which then died
        await reflections.reconcile()
        assert _queued_jobs(redis_server) == []  # on its way to the lease, maybe

        late = JobState(state="queued", at=time.time() - LEASE_S - 1).model_dump_json()
        client.set(redis_keys.job_state(queued.request_id), late)
        await reflections.reconcile()
        assert _queued_jobs(redis_server) == [queued.request_id]

    asyncio.run(scenario())


def test_a_finished_job_settles_its_entry_from_redis_when_the_stream_was_missed(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:

    async def scenario() -> None:
        running = await _send(reflections, chat)
        outcome = _outcome(running)
        redis_server.client.set(redis_keys.job_state(running.request_id), outcome.model_dump_json())
        waiting = asyncio.create_task(reflections.wait(running.request_id, 10))

        await reflections.reconcile()

        assert await waiting == outcome
        assert reflections.outbox.entries(agent.id) == []

    asyncio.run(scenario())


def test_with_redis_down_requests_wait_on_disk_and_go_out_when_it_is_back(
    agentd_home: Path, agent: AgentRecord, reflections: Reflections, chat: Conversation
) -> None:

    async def scenario() -> None:
        request = reflections.outbox.submit(agent.id, "step-count", [chat.id])
        assert await reflections.dispatch(agent.id) is None
        assert reflections.outbox.broker_down
        server = RedisForTests(agentd_home).start()
        try:
            await reflections.reconcile()
            assert _queued_jobs(server) == [request.request_id]
        finally:
            server.stop()

    asyncio.run(scenario())


def test_a_damaged_entry_is_moved_aside_and_the_others_still_go_out(
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    outbox = reflections.outbox.directory(agent.id)
    outbox.mkdir(parents=True)
    (outbox / "rq-00-garbled.json").write_text('{"request": {"agent_id": ')

    async def scenario() -> None:
        with capture_logs() as logs:
            request = reflections.outbox.submit(agent.id, "step-count", [chat.id])
            await reflections.reconcile()
        assert _queued_jobs(redis_server) == [request.request_id]
        assert (outbox / "rq-00-garbled.corrupt").exists()
        assert any(entry["event"] == "outbox_entry_corrupt" for entry in logs)

    asyncio.run(scenario())


def test_the_reconcile_loop_survives_a_failing_pass(
    agentd_home: Path, agent: AgentRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    reflections = _reflections(agentd_home)
    passes = []

    async def flaky() -> None:
        passes.append(1)
        if len(passes) == 1:
            raise RuntimeError("one bad pass")

    monkeypatch.setattr(reflections, "reconcile", flaky)
    monkeypatch.setattr(reflections.settings, "reflection_reconcile_s", 0.01)

    async def scenario() -> None:
        with capture_logs() as logs:
            task = asyncio.create_task(reflections._reconcile_loop())
            await wait_until(lambda: len(passes) >= 3, "three reconcile passes")
            task.cancel()
        assert any(entry["event"] == "reflection_reconcile_failed" for entry in logs)

    asyncio.run(scenario())


def test_an_answered_job_whose_answer_redis_lost_goes_again_with_new_inputs(
    agentd_home: Path,
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """A worker would take the same inputs for answered: the job is sent with new ones."""

    async def scenario() -> None:
        running = await _send(reflections, chat)
        (sent,) = reflections.outbox.entries(agent.id)
        assert sent.ticket is not None
        old_input = sent.ticket.input_id
        client = redis_server.client
        pipe = client.pipeline()
        jobs.mark_answered(pipe, running.request_id, old_input)  # and the answer is gone
        pipe.execute()
        client.delete(redis_keys.REFLECTION_QUEUE)

        await reflections.reconcile()  # finds the answer gone: the job's state goes too
        await asyncio.gather(*reflections.answers._tasks)
        await reflections.reconcile()  # unknown now: sent again, built anew

        (again,) = reflections.outbox.entries(agent.id)
        assert again.ticket is not None and again.ticket.input_id != old_input
        assert not client.exists(redis_keys.job_input(old_input))
        assert client.exists(redis_keys.job_input(again.ticket.input_id))
        assert _queued_jobs(redis_server) == [running.request_id]

    asyncio.run(scenario())


def test_a_job_sent_again_that_a_gate_now_stops_is_settled_with_the_gates_outcome(
    agentd_home: Path,
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """Redis lost the job; meanwhile the user edited memory by hand: the job is not sent
    again, the request ends ``skipped: parent_dirty`` (told, as a waiting turn would be)."""

    async def scenario() -> None:
        running = await _send(reflections, chat)
        redis_server.client.flushall()
        memory = Layout(agentd_home).memory_dir(agent.id)
        (memory / "scratch.md").write_text("the user's own edit\n")

        await reflections.reconcile()

        assert reflections.outbox.entries(agent.id) == []
        outcome = await reflections.wait(running.request_id, 0)
        assert outcome is not None and (outcome.status, outcome.reason) == (
            "skipped",
            "parent_dirty",
        )
        logged = events.read(Layout(agentd_home).reflections_dir(agent.id))
        assert [(o.request_id, o.reason) for o in logged] == [(running.request_id, "parent_dirty")]
        assert _queued_jobs(redis_server) == []

    asyncio.run(scenario())


def test_an_answered_mark_a_stale_copy_left_for_old_inputs_queues_the_job_again(
    agentd_home: Path,
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """A copy of the job ran on inputs sent before and says "answered" for them: the job's
    current inputs are kept, and the job counts as queued again, not as lost."""

    async def scenario() -> None:
        running = await _send(reflections, chat)
        (sent,) = reflections.outbox.entries(agent.id)
        assert sent.ticket is not None
        pipe = redis_server.client.pipeline()
        jobs.mark_answered(pipe, running.request_id, "rq-old-inputs")
        pipe.execute()

        await reflections.reconcile()
        await asyncio.gather(*reflections.answers._tasks)

        (kept,) = reflections.outbox.entries(agent.id)
        assert kept.ticket == sent.ticket
        assert jobs.status(redis_server.client, running.request_id, agent.id, LEASE_S) == "queued"

    asyncio.run(scenario())


def test_a_request_a_daemon_died_before_sending_goes_out_at_the_next_daemons_first_pass(
    agentd_home: Path,
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """The outbox on disk is what a daemon killed between recording a request and sending
    it leaves; the next daemon sends it, once."""

    async def scenario() -> None:
        request = reflections.outbox.submit(agent.id, "step-count", [chat.id])  # then killed

        await _reflections(agentd_home).reconcile()  # a new daemon

        assert _queued_jobs(redis_server) == [request.request_id]
        (entry,) = reflections.outbox.entries(agent.id)
        assert (entry.request.request_id, entry.state) == (request.request_id, "sent")

    asyncio.run(scenario())


def test_a_job_answered_while_the_daemon_was_down_is_settled_at_the_next_daemons_first_pass(
    agentd_home: Path,
    agent: AgentRecord,
    redis_server: RedisForTests,
    reflections: Reflections,
    chat: Conversation,
) -> None:
    """The answer's announcement on the stream went to nobody: the new daemon asks Redis
    about its sent job, finds it answered and settles it, with one outcome."""

    async def scenario() -> None:
        running = await _send(reflections, chat)
        answer = await asyncio.to_thread(  # a worker, in a thread: it runs a loop of its own
            work_sent_job,
            agentd_home,
            agent.id,
            running.request_id,
            MockReflector(),
            redis_server.client,
        )
        assert answer is not None and answer.status == "ran"
        restarted = _reflections(agentd_home)

        await restarted.reconcile()
        await asyncio.gather(*restarted.answers._tasks)

        assert restarted.outbox.entries(agent.id) == []
        logged = events.read(Layout(agentd_home).reflections_dir(agent.id))
        assert [o.request_id for o in logged] == [running.request_id]
        assert jobs.finished(redis_server.client, running.request_id) is not None

    asyncio.run(scenario())
