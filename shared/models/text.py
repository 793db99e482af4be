"""How long a text is to a model's token estimate: UTF-16 code units.

The four-characters-per-token rule (:mod:`shared.providers.tokens`) counts these, so an
emoji counts 2 as in the source we follow. It lives with the models because a message
caches its own length (:attr:`shared.models.messages.Message.model_chars`).
"""

from __future__ import annotations


def text_chars(text: str) -> int:
    """Length in UTF-16 code units. ASCII text, most of a request, is its length: no copy
    of it is made (every request is measured)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2
