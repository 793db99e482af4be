"""What a pydantic field allows of a number: the bounds tests check every one has both."""

from __future__ import annotations

from typing import get_args

from pydantic.fields import FieldInfo


def is_numeric(info: FieldInfo) -> bool:
    """``int`` or ``float``, optional or not."""
    return bool({int, float} & {info.annotation, *get_args(info.annotation)})


def bounds(info: FieldInfo) -> set[str]:
    """Which of ``ge``, ``gt``, ``le``, ``lt`` the field sets."""
    limits = ("ge", "gt", "le", "lt")
    return {
        name for item in info.metadata for name in limits if getattr(item, name, None) is not None
    }
