"""Ids: user-supplied ones are validated before they become paths; ours sort by creation."""

from __future__ import annotations

import os
import time

import pytest

from shared.errors import InvalidId
from shared.ids import _ULID, new_id, validate_agent_id, validate_id


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a b", ".", "..", "x" * 65, "é", None, 5])
def test_path_like_or_malformed_ids_are_refused(bad: object) -> None:
    with pytest.raises(InvalidId):
        validate_id(bad)


def test_reflection_suffix_is_only_accepted_where_asked_for() -> None:
    assert validate_agent_id("agent-1~reflection", allow_reflection=True) == "agent-1~reflection"
    with pytest.raises(InvalidId):
        validate_agent_id("agent-1~reflection")
    with pytest.raises(InvalidId):
        validate_agent_id("../x~reflection", allow_reflection=True)


def test_new_ids_are_valid_unique_and_sort_in_creation_order() -> None:
    ids = [new_id("msg") for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(validate_id(i) for i in ids)


def test_processes_forked_within_one_millisecond_never_make_the_same_id() -> None:
    """Prefork workers are forked from one parent: each must not count up from the
    parent's last id, nor draw the parent's random bits."""
    saved = (_ULID._last_ms, _ULID._last_rand)
    # As if the parent made an id in the very millisecond its children start in.
    _ULID._last_ms = time.time_ns() // 1_000_000 + 60_000
    try:
        made = [_id_made_in_a_forked_child() for _ in range(2)]
    finally:
        _ULID._last_ms, _ULID._last_rand = saved
    assert made[0] != made[1]
    assert all(validate_id(i) for i in made)


def _id_made_in_a_forked_child() -> str:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write_end, new_id("msg").encode())
        os._exit(0)
    os.close(write_end)
    made = os.read(read_end, 100).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    return made
