"""Code shared by the agentd daemon, the reflector workers and the agentctl client.

This package must stay import-light: ``agentctl`` imports ``shared.protocol`` and its
standard-library neighbours (``home``, ``message_refs``, ``setting_choices``), and pays for
whatever this ``__init__`` pulls in. Nothing here imports pydantic, litellm, Celery or git.
"""
