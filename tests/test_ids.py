"""Ids: user-supplied ones are validated before they become paths; ours sort by creation."""

from __future__ import annotations

import pytest

from shared.errors import InvalidId
from shared.ids import new_id, validate_agent_id, validate_id


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
