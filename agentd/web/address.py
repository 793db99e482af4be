"""Where the web view listens (``AGENTD_WEB=host:port``) and which Host headers it answers.

The view is meant for this machine's browser: loopback unless the user names another
address, which is allowed but announced (anyone who can reach the port can try it). The
Host header check is the defence against DNS rebinding: a page on an attacker's name that
resolves to 127.0.0.1 reaches the port, but its requests carry the attacker's name.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from shared.errors import WebAddressError

DEFAULT_WEB_ADDRESS = "127.0.0.1:8765"
"""What ``agentd up --web`` serves on when ``AGENTD_WEB`` names nothing else."""

_HOST = r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+))"
_ADDRESS = re.compile(rf"^{_HOST}:(?P<port>\d{{1,5}})$")
_HOST_HEADER = re.compile(rf"^{_HOST}(?::(?P<port>\d{{1,5}}))?$")
"""A Host header: the port may be left out when it is HTTP's own (80)."""


@dataclass(frozen=True, slots=True)
class WebAddress:
    host: str
    """An IP address or a host name, without the brackets of an IPv6 literal."""
    port: int
    """0 asks the kernel for a free port (tests)."""

    @classmethod
    def parse(cls, text: str) -> WebAddress:
        match = _ADDRESS.match(text.strip())
        if match is None:
            raise WebAddressError(
                f"web address {text!r} is not host:port; use e.g. {DEFAULT_WEB_ADDRESS} "
                "or [::1]:8765"
            )
        host = match["v6"] or match["host"]
        if match["v6"] is not None:
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise WebAddressError(
                    f"web address {text!r}: {host} is not an IPv6 address"
                ) from None
        port = int(match["port"])
        if port > 65_535:
            raise WebAddressError(f"web address {text!r}: port {port} is over 65535")
        return cls(host.lower(), port)

    @property
    def loopback(self) -> bool:
        """Only this machine can connect: a loopback IP, or ``localhost``."""
        if self.host == "localhost":
            return True
        ip = _ip(self.host)
        return ip is not None and ip.is_loopback

    @property
    def wildcard(self) -> bool:
        """Every interface (``0.0.0.0``, ``::``)."""
        ip = _ip(self.host)
        return ip is not None and ip.is_unspecified

    def netloc(self, port: int) -> str:
        """``host:port`` as a URL writes it (an IPv6 literal in brackets); a wildcard
        address is written as loopback, which it includes."""
        host = self.host
        if self.wildcard:
            host = "127.0.0.1" if ":" not in host else "::1"
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def accepts_host(self, header: str | None, port: int) -> bool:
        """Whether a request's Host header names this server: the right port and the bound
        host (``localhost`` and loopback IPs too when bound to loopback; any IP literal
        when bound to every interface, but never another name, which is how a rebound
        DNS name arrives)."""
        if not header:
            return False
        match = _HOST_HEADER.match(header.strip())
        if match is None or int(match["port"] or 80) != port:
            return False
        named = (match["v6"] or match["host"]).lower()
        if named == self.host:
            return True
        ip = _ip(named)
        if self.wildcard:
            return ip is not None or named == "localhost"
        if self.loopback:
            return named == "localhost" or (ip is not None and ip.is_loopback)
        return False


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
