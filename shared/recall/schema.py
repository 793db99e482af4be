"""What a message is in the tantivy index: its fields, and the numbers that name it.

Per message the index holds its text twice (:mod:`shared.recall.text`: ``words`` for
ranking, ``tokens`` for phrases and CJK terms) and a few numbers in fast fields, which a
search reads for its hits without touching the text:

- ``conv``: the conversation, as the 64-bit hash of its id (:func:`conversation_hash`);
  indexed, for a search limited to one conversation;
- ``key``: the conversation's hash in the high 32 bits and the message's number among the
  conversation's indexed messages (``seq``: 0, 1, 2 …) in the low 32: the message before
  is ``key - 1`` and the one after ``key + 1``, which is how ranking finds a message's
  neighbours (:mod:`shared.recall.lending`) without storing links; fast;
- ``block``: ``key`` less its low :data:`BLOCK_BITS` bits, indexed: the eight messages
  around a key are one term, so that a search among a few candidates' neighbours looks up
  a term per block (a candidate's five nearest keys lie in one or two) rather than one
  per key, and the index holds an eighth as many of these terms;
- ``role`` (0 user, 1 assistant, 2 tool; indexed), ``created`` (POSIX microseconds: an
  integer column is read several times faster than a float one);
- ``line``: where the message's line starts in its conversation's ``messages.jsonl``, in
  the low 40 bits, under 24 bits of the message id's hash: a hit is read from the log
  there, so the index stores no text at all. The noise is for speed: tantivy stores a
  column whose values it can fit piecewise by lines (offsets, dates, counters) as such
  pieces, and reads the whole table of pieces each time a search opens the column (45 µs
  at a million messages, a third of a short query); a column of noise is stored bit-packed
  and opened in a microsecond, for 8 bytes a message;
- ``id``: the message id, indexed as is (``messages --around`` finds a message by it).

An *echo* (a recall search's call or result) has its text in ``echo_words`` and
``echo_tokens`` instead: echoes still match, but they never count in the statistics
(document frequencies, average length) the other messages are ranked by, and a search of
the main fields never has to step over them.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import tantivy
from xxhash import xxh3_64_intdigest

from shared.recall.documents import Document
from shared.recall.text import TOKENS, WORDS, analyzers, prepare

ROLES = ("user", "assistant", "tool")
ROLE_CODE = {role: code for code, role in enumerate(ROLES)}
ECHO = "echo_"
"""The prefix of an echo's text fields."""
SEQ_BITS = 32
SEQ_MASK = (1 << SEQ_BITS) - 1
OFFSET_BITS = 40
OFFSET_MASK = (1 << OFFSET_BITS) - 1
"""A log's size the ``line`` field can point into (1 TB)."""
BLOCK_BITS = 3
"""``block`` is ``key >> BLOCK_BITS``: blocks of eight consecutive messages."""
SCHEMA_VERSION = 3
"""Bump whenever the fields change (1: ``seq`` and ``offset`` columns; 2: ``key`` and
``line``; 3: ``block``, and ``key`` no longer indexed): an index stored with another
version is rebuilt."""


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("key", fast=True)
    builder.add_unsigned_field("block", indexed=True)
    builder.add_unsigned_field("conv", indexed=True, fast=True)
    builder.add_unsigned_field("role", indexed=True, fast=True)
    builder.add_unsigned_field("created", fast=True)
    builder.add_unsigned_field("line", fast=True)
    builder.add_text_field("id", tokenizer_name="raw", index_option="basic")
    for prefix in ("", ECHO):
        builder.add_text_field(prefix + "words", tokenizer_name=WORDS, index_option="freq")
        builder.add_text_field(prefix + "tokens", tokenizer_name=TOKENS, index_option="position")
    return builder.build()


def open_index(directory: Path | None) -> tantivy.Index:
    """The index in ``directory`` (made there if there is none), or one in memory.

    ``directory`` is made, never its parent: an agent deleted while its index was being
    opened has had its directory moved to the trash, and it must not come back as a
    directory holding only an index (:class:`FileNotFoundError` instead)."""
    schema = build_schema()
    if directory is None:
        index = tantivy.Index(schema)
    else:
        directory.mkdir(exist_ok=True)
        index = tantivy.Index(schema, path=str(directory))
    for name, analyzer in analyzers().items():
        index.register_tokenizer(name, analyzer)
    return index


def microseconds(seconds: float) -> int:
    """A date as the ``created`` field holds it (none before 1970: a date that would not
    parse is 0 already)."""
    return max(0, round(seconds * 1_000_000))


def conversation_hash(conversation_id: str) -> int:
    """A conversation's number in the index: stable across processes, unlike ``hash``."""
    return xxh3_64_intdigest(conversation_id.encode())


def message_key(conversation: int, seq: int) -> int:
    """The ``key`` of the conversation's ``seq``-th indexed message (see the module)."""
    return ((conversation & SEQ_MASK) << SEQ_BITS) | seq


def place(address: tantivy.DocAddress) -> tuple[int, int]:
    """A message's identity within one searcher (``DocAddress`` is not hashable)."""
    return address.segment_ord, address.doc


def fast_ints(
    searcher: tantivy.Searcher, field: str, addresses: list[tantivy.DocAddress]
) -> list[int]:
    """A fast field's values: every field here is an unsigned integer every document has,
    where tantivy types its reads for any field kind (``int | float | bool | None``)."""
    return cast(list[int], searcher.fast_field_values(field, addresses))


def block_of(key: int) -> int:
    """The ``block`` of the message with this ``key``."""
    return key >> BLOCK_BITS


def keys_of(searcher: tantivy.Searcher, addresses: list[tantivy.DocAddress]) -> list[int]:
    """The keys of these messages (from the fast field)."""
    return fast_ints(searcher, "key", addresses)


def offsets_of(searcher: tantivy.Searcher, addresses: list[tantivy.DocAddress]) -> list[int]:
    """Where these messages' lines start in their logs (see ``line`` in the module)."""
    return [line & OFFSET_MASK for line in fast_ints(searcher, "line", addresses)]


def line_field(message_id: str, offset: int) -> int:
    """The ``line`` field of the message with this id whose line starts at ``offset``."""
    noise = xxh3_64_intdigest(message_id.encode()) >> OFFSET_BITS
    return (noise << OFFSET_BITS) | (max(offset, 0) & OFFSET_MASK)


def to_document(document: Document, conversation: int, seq: int) -> tantivy.Document:
    text = prepare(document.text)
    prefix = ECHO if document.echo else ""
    indexed = tantivy.Document()
    key = message_key(conversation, seq)
    indexed.add_unsigned("key", key)
    indexed.add_unsigned("block", block_of(key))
    indexed.add_unsigned("conv", conversation)
    indexed.add_unsigned("role", ROLE_CODE[document.role])
    indexed.add_unsigned("created", microseconds(document.created_at))
    indexed.add_unsigned("line", line_field(document.message_id, document.offset))
    indexed.add_text("id", document.message_id)
    indexed.add_text(prefix + "words", text.words)
    indexed.add_text(prefix + "tokens", text.tokens)
    return indexed
