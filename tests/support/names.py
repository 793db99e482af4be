"""Paths as a scripted model writes them: by the names its system prompt gives."""

from __future__ import annotations

from pathlib import Path

from shared.agent.tools.view import memory_name


def model_path(memory_dir: Path | str, relative: str) -> str:
    """A file of the agent's memory as the model names it: under ``/memory`` where bash
    runs in bubblewrap, under the host path where it runs bare."""
    return f"{memory_name(Path(memory_dir))}/{relative}"
