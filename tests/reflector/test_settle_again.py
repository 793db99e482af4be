"""The daemon killed while settling an answer, after the merge and before the outcome was
recorded: the answer is still in Redis and the outbox entry still says sent, so the next
daemon sweeps what the dead one left in memory's repo and settles the same answer again.
The commits memory already holds under the job's id are the merge: nothing lands twice."""

from __future__ import annotations

import asyncio

from agentd.jobs.checkout import sweep_orphans
from agentd.jobs.settle import read_answer, settle
from shared.models.reflection import ReflectionOutcome
from shared.providers.mock_reflector import MockReflector
from shared.store.layout import Layout
from tests.reflector.conftest import World


def test_an_answer_settled_again_after_the_daemon_died_past_its_merge_lands_once(
    world: World,
) -> None:
    jobs = world.jobs(MockReflector())
    request = world.request()
    prepared = jobs.prepare(request)
    assert not isinstance(prepared, ReflectionOutcome)
    assert jobs.work(prepared) is not None
    found = jobs.transfer.get_answer(prepared.ticket.input_id)
    assert found is not None
    raw, bundle = found
    first = asyncio.run(settle(jobs.desk, request, prepared.ticket, read_answer(raw), bundle))
    assert first.status == "merged"  # ... and the daemon dies before recording it
    merged_head = world.git("rev-parse", "HEAD")
    worktrees = Layout(world.home).reflection_files(world.agent.id).worktrees

    sweep_orphans(world.memory, worktrees)  # the next daemon starts
    again = jobs.settle(request, prepared)

    assert again is not None and (again.status, again.commits) == ("merged", first.commits)
    assert world.git("rev-parse", "HEAD") == merged_head, "merged a second time"
    assert world.human().count("- 我更喜欢用 tabs 缩进") == 1
    assert world.git("branch", "--list", "reflection/*") == ""
    logged = (world.reflections / "log.jsonl").read_text().splitlines()
    assert [ReflectionOutcome.model_validate_json(line).status for line in logged] == ["merged"]
