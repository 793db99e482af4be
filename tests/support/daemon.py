"""Run a real agentd ``Daemon`` in a thread for tests, and talk to it like agentctl does."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from agentd.client.connection import Connection
from agentd.daemon.server import Daemon
from agentd.recall.client import RecallClient
from shared.clock import Clock, utc_now
from shared.providers.base import Provider
from shared.providers.factory import ProviderFactory
from shared.settings import Settings
from tests.support.forked_recall import spawn_forked
from tests.support.waiting import ceiling


class FixedProviders(ProviderFactory):
    """Every agent gets the same provider (a scripted or slow one, say)."""

    def __init__(self, settings: Settings, provider: Provider) -> None:
        super().__init__(settings)
        self.provider = provider

    def get(self, model: str | None = None, context_window: int | None = None) -> Provider:
        return self.provider


class DaemonRunner:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.daemon: Daemon | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(
        self,
        provider: Provider | None = None,
        *,
        clock: Clock = utc_now,
        providers: type[ProviderFactory] | None = None,
        **settings: Any,
    ) -> Daemon:
        """Serve with ``settings``; every agent gets ``provider`` if one is given, else the
        models ``providers`` (default: the daemon's own factory) makes."""
        config = Settings(home=self.home, **settings)
        factory = FixedProviders(config, provider) if provider else None
        if providers is not None:
            factory = providers(config)
        recall = RecallClient(config, spawn=spawn_forked)
        self.daemon = Daemon(config, providers=factory, clock=clock, recall=recall)
        ready = threading.Event()

        def run() -> None:
            async def main() -> None:
                self.loop = asyncio.get_running_loop()
                started = asyncio.Event()
                serving = asyncio.create_task(self.daemon.serve(ready=started))  # type: ignore[union-attr]
                waiting = asyncio.create_task(started.wait())
                await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                if not serving.done():
                    ready.set()
                await serving

            try:
                asyncio.run(main())
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
                ready.set()

        self.thread = threading.Thread(target=run, name="agentd-test", daemon=True)
        self.thread.start()
        if not ready.wait(ceiling(30)):
            raise TimeoutError(f"the test daemon did not start within {ceiling(30):.0f} s")
        if self.error:
            raise self.error
        return self.daemon

    def connect(self) -> Connection:
        return Connection()

    def call(self, op: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every line the daemon sent for one request (events, then the final line)."""
        conn = self.connect()
        try:
            return list(conn.call(op, params))
        finally:
            conn.close()

    def result(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        conn = self.connect()
        try:
            return conn.result(op, params)
        finally:
            conn.close()

    def stop(self) -> None:
        if self.daemon is None or self.thread is None or self.loop is None:
            return
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.daemon.request_shutdown)
            self.thread.join(ceiling(30))
        self.daemon = None
        if self.error:
            raise self.error
