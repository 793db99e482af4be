"""The memory a new agent starts from, and the marker of an integration task. (Its base
system prompt is part of its record: :data:`shared.models.agents.BASE_SYSTEM_PROMPT`.)"""

INTEGRATION_MARKER = "[reflection integration]"
"""Opens every explicit-merge integration task, so a transcript shows what it was."""

DEFAULT_PERSONA = "I am a helpful assistant who remembers what matters to the user."
DEFAULT_HUMAN = ""
