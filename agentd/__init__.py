"""agentd: the chat daemon (``agentd``) and its thin client (``agentctl``).

Keep this import-light: ``agentctl`` imports ``agentd.client``, which loads this file.
"""

__version__ = "0.1.0"
