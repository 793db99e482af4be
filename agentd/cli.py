"""The ``agentd`` command: ``serve`` runs the chat daemon in the foreground; ``up`` runs
the whole stack (embedded Valkey, the daemon, the reflection workers)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from agentd import __version__

if TYPE_CHECKING:
    from shared.settings import Settings


def _settings() -> Settings | None:
    from pydantic import ValidationError

    from shared.settings import Settings

    try:
        return Settings()
    except ValidationError as exc:
        print(f"agentd: invalid settings: {exc}", file=sys.stderr)
        return None


def _serve() -> int:
    from shared.logging import configure

    settings = _settings()
    if settings is None:
        return 2
    configure(
        "agentd",
        level=settings.log_level,
        console_format=settings.log_format,
        log_dir=settings.layout.logs_dir,
    )
    from agentd.server import Daemon

    return Daemon(settings).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentd", description="The agentd daemon.")
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the chat daemon in the foreground")
    sub.add_parser("up", help="run the whole stack in the foreground (Ctrl-C stops it)")
    sub.add_parser("doctor", help="check the setup and say how to fix each problem")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve()
    if args.command == "doctor":
        from agentd.doctor import run_doctor

        settings = _settings()
        return 2 if settings is None else run_doctor(settings)
    if args.command == "up":
        from agentd.supervisor import Stack

        settings = _settings()
        return 2 if settings is None else Stack(settings).run()
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
