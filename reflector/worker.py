"""The worker's entry point: ``celery -A reflector.worker worker …`` (what ``agentd up``,
the Procfile and the systemd unit run).

Celery's command line loads an app by name and cannot call a factory, so this module is
the one place a worker process reads its :class:`Settings` and builds its app; the rest
of ``reflector`` is configured only through :func:`reflector.app.create_app`.
"""

from __future__ import annotations

from reflector.app import create_app
from shared.priority import lower_this_thread
from shared.providers.keys import take_provider_keys
from shared.settings import Settings

settings = Settings()
lower_this_thread()  # reflection is background work: the daemon's loop gets the CPU first
# Out of the environment before a sub-agent's shell can start (shared/providers/keys.py).
app = create_app(settings, provider_keys=take_provider_keys())
