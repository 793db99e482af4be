"""The ``agentd`` command: ``serve`` runs the chat daemon in the foreground; ``up`` runs
the whole stack (embedded Valkey, the daemon, the reflection workers); ``worker`` runs
reflection workers alone, on this host or another (:mod:`agentd.stack.worker_cli`)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING

from agentd import __version__

if TYPE_CHECKING:
    from shared.settings import Settings


def _settings(**given: tuple[str, str]) -> Settings | None:
    """The settings, or None once what is wrong with them is printed (exit 2)."""
    from shared.errors import InvalidSettings
    from shared.settings import load_settings

    try:
        return load_settings(**given)
    except InvalidSettings as exc:
        print(f"agentd: invalid settings: {exc.message}", file=sys.stderr)
        return None


def _serve() -> int:
    """The daemon, holding the home's ``serve`` lock for its run: of two started at once,
    one serves and the other says so and exits 1."""
    from agentd.stack import instance

    settings = _settings()
    if settings is None:
        return 2
    lock = instance.hold(settings.layout.serve_lock)  # before anything else starts
    if lock is None:
        print(
            f"agentd serve is already running for {settings.home}; stop it first "
            "(`agentctl shutdown`)",
            file=sys.stderr,
        )
        return 1
    with lock:
        return _run_daemon(settings)


def _run_daemon(settings: Settings) -> int:
    from shared.logging import configure
    from shared.store.permissions import secure_home

    configure(
        "agentd",
        level=settings.log_level,
        console_format=settings.log_format,
        log_dir=settings.layout.logs_dir,
    )
    secure_home(settings.home)
    from agentd.recall.client import RecallClient
    from shared.providers.credentials import take_provider_keys
    from shared.store.agents import AgentStore

    # Out of the environment before any child starts (shared/providers/credentials.py).
    keys = take_provider_keys()
    # Recall's process starts first: its imports and the opening of every agent's index
    # then overlap with the daemon's own start-up, and a search soon after it is answered.
    recall = RecallClient(settings)
    recall.open([record.id for record in AgentStore(settings.layout).scan().records])
    from agentd.daemon.server import Daemon
    from shared.providers.factory import ProviderFactory

    return Daemon(settings, providers=ProviderFactory(settings, keys), recall=recall).run()


def _with_web(settings: Settings, address: str) -> Settings | None:
    """``agentd up --web [HOST:PORT]``: the web view at HOST:PORT, else where ``AGENTD_WEB``
    says, else on loopback's default port."""
    from agentd.web.address import DEFAULT_WEB_ADDRESS

    return _settings(web=("--web", address or settings.web or DEFAULT_WEB_ADDRESS))


def _up(settings: Settings) -> int:
    """The whole stack; what ``agentd up`` itself logs goes out with its children's lines."""
    from agentd.stack.output import console_output
    from agentd.stack.supervisor import Stack
    from shared.logging import configure
    from shared.providers.credentials import take_provider_keys

    # Held for the daemon and the workers, handed to each on a descriptor.
    stack = Stack(settings, take_keys=take_provider_keys)
    configure(
        "agentd-up",
        level=settings.log_level,
        console_format="console" if console_output(settings) else "json",
        console=stack.log_stream(),
    )
    return stack.run()


def _doctor(settings: Settings, args: argparse.Namespace) -> int:
    if args.worker:
        from agentd.stack.doctor_worker import run_worker_doctor

        return run_worker_doctor(settings)
    from agentd.stack.doctor import run_doctor

    code = run_doctor(settings, fix=args.fix)
    sys.stdout.flush()  # here, so that a reader gone (``| head -1``) is caught by the caller
    return code


def _stdout_closed() -> int:
    """Whoever read the findings stopped (``agentd doctor | head -1``): exit 0 quietly, as
    agentctl does. stdout goes to /dev/null first, or the interpreter's last flush at exit
    fails again and prints "Exception ignored … BrokenPipeError"."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    from shared.store.permissions import private_umask

    private_umask()  # before any command creates a file: the home is one user's
    parser = argparse.ArgumentParser(prog="agentd", description="The agentd daemon.")
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the chat daemon in the foreground")
    up = sub.add_parser("up", help="run the whole stack in the foreground (Ctrl-C stops it)")
    up.add_argument(
        "--web",
        nargs="?",
        const="",
        metavar="HOST:PORT",
        help="also serve the web view (`agentctl web` opens it) at HOST:PORT, default "
        "AGENTD_WEB or 127.0.0.1:8765",
    )
    doctor = sub.add_parser("doctor", help="check the setup and say how to fix each problem")
    doctor.add_argument(
        "--fix",
        action="store_true",
        help="first make every file and directory under the home private (chmod go-rwx)",
    )
    doctor.add_argument(
        "--worker",
        action="store_true",
        help="check this host as a reflection worker's: Redis, its password, the model "
        "settings, the sandbox (no home needed)",
    )
    worker = sub.add_parser("worker", help="run reflection workers alone, against AGENTD_REDIS_URL")
    worker.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="jobs run at once (default AGENTD_WORKERS)",
    )
    worker.add_argument(
        "--name",
        default="reflector",
        help="the worker's name in `agentctl status`, before @host (default reflector)",
    )
    args = parser.parse_args(argv)
    if args.command in ("serve", "up"):
        from shared.providers.credentials import without_keys_in_the_environment

        # Before anything else: no process of the stack is started with a key in its
        # environment, this one included (shared/providers/credentials.py).
        without_keys_in_the_environment()
    if args.command == "serve":
        return _serve()
    if args.command == "doctor":
        settings = _settings()
        if settings is None:
            return 2
        try:
            return _doctor(settings, args)
        except BrokenPipeError:
            return _stdout_closed()
    if args.command == "worker":
        from agentd.stack.worker_cli import run_worker

        settings = _settings()
        if settings is None:
            return 2
        concurrency = args.concurrency or settings.workers or 1
        if not 1 <= concurrency <= 64:
            parser.error("--concurrency must be between 1 and 64")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", args.name):
            parser.error("--name takes 1-64 letters, digits, '.', '_' or '-'")
        return run_worker(settings, concurrency=concurrency, name=args.name)
    if args.command == "up":
        settings = _settings()
        if settings is not None and args.web is not None:
            settings = _with_web(settings, args.web)
        return 2 if settings is None else _up(settings)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
