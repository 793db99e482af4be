"""How people name a message: its full id or the short form ``agentctl`` prints. Standard
library only: the client shortens ids with it, the daemon resolves them with it.
"""

from __future__ import annotations

SHORT_ID_CHARS = 8
"""How much of a message id people see: its last 8 characters (40 random bits, see
:mod:`shared.ids`). Every request that takes a message id takes this short form too, while
it names one message only."""


def short_id(message_id: str) -> str:
    return message_id[-SHORT_ID_CHARS:]


def names_message(ref: str, message_id: str) -> bool:
    """Whether ``ref`` names ``message_id``: the id itself, or its short form (its last
    :data:`SHORT_ID_CHARS` or more characters)."""
    return ref == message_id or (len(ref) >= SHORT_ID_CHARS and message_id.endswith(ref))
