"""``agentd up --web``: where the web view is, said once it is there.

The address is checked before anything starts (``agentd up`` exits 1 on one that is not
``host:port``), and one other machines can reach is warned about then. The URL itself is
announced only when the daemon says it serves the view: the daemon binds the port, and a
port another program holds (or a host this machine does not have) leaves the stack
running without a web view, which ``agentd up`` then says instead of a URL that leads
nowhere. The daemon is asked over its socket (``config.show``, whose ``api_endpoint`` is
set only while the view listens), by a thread, since the supervisor's own thread watches
the children.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

from agentd.web.address import DEFAULT_WEB_ADDRESS, WebAddress
from shared import protocol
from shared.errors import WebAddressError
from shared.settings import Settings

Say = Callable[[str, str, str], None]
"""``say(event, text, level)``: the supervisor's own line."""
ASK_EVERY_S = 0.2
ASK_TIMEOUT_S = 5.0
API_SUFFIX = "/v1"


def check_address(settings: Settings, say: Say) -> str | None:
    """What is wrong with ``AGENTD_WEB`` (None when it is right or unset); a right one
    open to other machines is warned about."""
    if not settings.web:
        return None
    try:
        address = WebAddress.parse(settings.web)
    except WebAddressError as exc:
        return str(exc)
    if not address.loopback:
        say(
            "web_view_not_loopback",
            f"the web view listens on {settings.web}, reachable from other machines (a "
            f"login token is still needed); AGENTD_WEB={DEFAULT_WEB_ADDRESS} keeps it on "
            "this one",
            "warning",
        )
    return None


def announce_when_served(settings: Settings, say: Say, stopping: threading.Event) -> None:
    """Start a thread that waits for the daemon's answer, then says where the web view
    is, or that there is none and why to look at the daemon's line above."""
    if settings.web:
        threading.Thread(
            target=_announce, args=(settings, say, stopping), name="web-announce", daemon=True
        ).start()


def _announce(settings: Settings, say: Say, stopping: threading.Event) -> None:
    path = settings.layout.socket_path
    while not stopping.wait(ASK_EVERY_S):
        config = _ask(str(path), "config.show")
        if config is None:
            continue
        endpoint = config.get("api_endpoint")
        if isinstance(endpoint, str) and endpoint.endswith(API_SUFFIX):
            url = endpoint.removesuffix(API_SUFFIX)
            say("web_view", f"web view at {url}: `agentctl web` logs you in", "info")
        else:
            say(
                "web_view_not_served",
                f"no web view: the daemon could not listen on {settings.web} (its "
                "web_view_not_started line says why); the rest of the stack runs. Free the "
                "port or choose another (agentd up --web HOST:PORT), then restart",
                "error",
            )
        return


def _ask(path: str, op: str) -> dict[str, Any] | None:
    """The result of one request to the daemon, or None while it does not answer yet."""
    with contextlib.suppress(OSError, ValueError), socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(ASK_TIMEOUT_S)
        sock.connect(path)
        sock.sendall(protocol.request("up-web", op))
        with sock.makefile("rb") as lines:
            for line in lines:
                message = json.loads(line)
                if isinstance(message, dict) and "ok" in message:
                    return message.get("result") if message["ok"] else None
    return None
