"""Which slices a job reads: each requested conversation's unreflected slice, cut at a
snapshot end taken now (messages appended while the job runs wait for the next one).

A manual run over several conversations shows a conversation with nothing new as a
replay slice, so the reflector sees it beside the others; a replay never moves a
watermark. A conversation deleted since the request is left out, not recreated.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from shared.models.reflection import ReflectionRequest
from shared.reflection.slices import Slice, replay_slice, select_slice
from shared.reflection.state import load_state
from shared.store.layout import ConversationFiles, Layout

log = structlog.get_logger(__name__)


def requested_slices(layout: Layout, request: ReflectionRequest) -> list[tuple[Path, Slice]]:
    """Each requested conversation's log and the slice of it the job reads."""
    conversation_ids = list(request.conversation_ids)
    if request.recent:
        conversation_ids += _recent(layout, request.agent_id, request.recent)
    slices: list[tuple[Path, Slice]] = []
    for conversation_id in dict.fromkeys(conversation_ids):
        directory = layout.conversation_dir(request.agent_id, conversation_id)
        if not directory.is_dir():
            log.info("reflection_conversation_gone", conversation_id=conversation_id)
            continue  # deleted since the request: its state lock would recreate it
        log_path = ConversationFiles(directory).messages
        state = load_state(directory)
        found = select_slice(log_path, state.watermark, until_offset=_size(log_path))
        if found is None and request.trigger == "manual" and len(conversation_ids) > 1:
            found = replay_slice(log_path)
        if found is not None:
            slices.append((log_path, found))
    return slices


def _recent(layout: Layout, agent_id: str, count: int) -> list[str]:
    """The ``count`` conversations whose logs changed last."""
    found = (ConversationFiles(c).messages for c in layout.conversations_dir(agent_id).glob("*"))
    logs = sorted(
        (path for path in found if path.is_file()),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    return [path.parent.name for path in logs[:count]]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
