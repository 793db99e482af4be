"""The ``agentd`` command: ``serve`` runs the chat daemon in the foreground; ``up`` runs
the whole stack (today the daemon alone; Redis and reflection workers join it with the
reflection pipeline)."""

from __future__ import annotations

import argparse
import sys

from agentd import __version__


def _serve() -> int:
    from pydantic import ValidationError

    from shared.logging import configure
    from shared.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"agentd: invalid settings: {exc}", file=sys.stderr)
        return 2
    configure(
        "agentd",
        level=settings.log_level,
        console_format=settings.log_format,
        log_dir=settings.logs_dir,
    )
    from agentd.server import Daemon

    return Daemon(settings).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentd", description="The agentd daemon.")
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the chat daemon in the foreground")
    sub.add_parser("up", help="run the whole stack in the foreground (Ctrl-C stops it)")
    args = parser.parse_args(argv)
    if args.command in ("serve", "up"):
        return _serve()
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
