"""Settings for every agentd process, read once per entry point and passed down.

Sources, highest first: constructor arguments (tests), ``AGENTD_*`` environment
variables, ``$AGENTD_HOME/agentd.toml``, then the defaults below. ``AGENTD_HOME`` itself
comes only from the environment, since the config file lives inside it.

``agentd.toml`` is read strictly (:class:`StrictTomlSource`). A file that is not TOML,
or that names a key agentd has no setting for, is refused with one line naming the file,
the place and (for a key) the nearest setting's name: a typo such as ``tool_netwrok =
true`` silently falling back to the default is worse than not starting, since the user
believes the setting is in force. ``home`` is refused too: the file lives inside the
home, so the home can come only from ``AGENTD_HOME``. A value pydantic refuses is named
as the user wrote it (:func:`load_settings`): ``AGENTD_WORKERS='abc'`` when it came from
the environment, ``workers`` in the file's path when from the file.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from shared.errors import InvalidSettings
from shared.home import agentd_home
from shared.memory.content import DEFAULT_FILE_MAX_BYTES, DEFAULT_MEMORY_MAX_BYTES, MemoryLimits
from shared.models.agents import MAX_CONTEXT_WINDOW
from shared.protocol import MAX_REQUEST_BYTES
from shared.reflection.policy import DEFAULT_MERGE, DEFAULT_STEP_COUNT, DEFAULT_TRIGGER
from shared.setting_choices import MergeMode, ReflectionTrigger
from shared.store.layout import Layout

DEFAULT_MODEL = "mock"
DEFAULT_MAX_STEPS = 50
"""Steps (model calls) one turn may take before it stops with ``max_steps``."""
DEFAULT_MAX_MESSAGE_CHARS = 100_000
"""Longest user message a chat request may carry."""
DEFAULT_BASH_TIMEOUT_S = 60.0
DEFAULT_BASH_OUTPUT_CHARS = 30_000
DEFAULT_PROVIDER_TIMEOUT_S = 120.0
DEFAULT_PROVIDER_ATTEMPTS = 4
DEFAULT_SHUTDOWN_GRACE_S = 10.0
"""How long SIGTERM waits for turns in flight before cancelling them."""


ENV_PREFIX = "AGENTD_"
ENV_ONLY = frozenset({"home"})
"""Settings the file may not hold (the file is found through them)."""


class StrictTomlSource(TomlConfigSettingsSource):
    """``agentd.toml`` as pydantic-settings reads it, refusing what it would pass over. A
    table (``[section]``) is left alone: every setting is a plain value, so a table is no
    misspelt setting but another reader's part of a shared file (the password ``agentd
    up`` adds goes above any table for the same reason)."""

    def __init__(self, settings_cls: type[BaseSettings], toml_file: Path) -> None:
        self.path = toml_file
        super().__init__(settings_cls, toml_file=toml_file)
        known = set(settings_cls.model_fields) - ENV_ONLY
        for key, value in self.toml_data.items():
            if key in ENV_ONLY:
                raise InvalidSettings(
                    f"{toml_file}: `{key}` cannot be set in the file that lives in it; set "
                    f"{ENV_PREFIX}{key.upper()} in the environment instead"
                )
            if key not in known and not isinstance(value, dict):
                near = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean `{near[0]}`?)" if near else ""
                raise InvalidSettings(
                    f"{toml_file}: unknown setting `{key}`{hint}; the settings are the "
                    "README's AGENTD_* variables, lower case, without the prefix"
                )

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            return super()._read_file(file_path)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidSettings(f"{file_path} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise InvalidSettings(f"{file_path} cannot be read: {exc.strerror}") from None


def describe(exc: ValidationError, *, toml_file: Path, given: dict[str, str]) -> str:
    """One line per refused value, named where the user wrote it: ``given`` maps the
    settings passed on the command line to the flag that passed them (``--web``)."""
    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        lines.append(f"{_source(name, toml_file, given)}: {error['msg']}")
    return "\n".join(lines)


def _source(name: str, toml_file: Path, given: dict[str, str]) -> str:
    if name in given:
        return given[name]
    variable = f"{ENV_PREFIX}{name.upper()}"
    for key, value in os.environ.items():
        if key.upper() == variable:  # pydantic-settings reads them case-insensitively
            return f"{variable}={value!r}"
    return f"`{name}` in {toml_file}"


def default_worker_dir() -> Path:
    """``$XDG_STATE_HOME/agentd-worker`` (``~/.local/state/agentd-worker``)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "agentd-worker"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENTD_", extra="ignore")

    home: Path = Field(default_factory=agentd_home)
    """Data directory (``AGENTD_HOME``): agents, conversations, sockets, logs."""
    model: str = DEFAULT_MODEL
    """Default model for new agents: ``mock`` or any litellm model string."""
    context_window: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_WINDOW)
    """Override of the model's context window in tokens (``AGENTD_CONTEXT_WINDOW``)."""
    summary_model: str | None = None
    """Model that writes compaction summaries; unset means the agent's own model."""
    api_base: str | None = None
    """Base URL for the provider (e.g. an Ollama or OpenAI-compatible server)."""
    api_key: str | None = None
    """API key passed to litellm; normally the provider's own env var is enough."""
    redis_url: str | None = None
    """A Redis/Valkey URL (``redis://``, ``rediss://`` for TLS, ``unix://``); unset means
    the embedded Valkey under ``run/``."""
    redis_listen: str | None = Field(
        default=None, pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$"
    )
    """``host:port`` on which the embedded Valkey also listens over TCP, for workers on
    other hosts; never without a password (:attr:`redis_password`: ``agentd up`` makes one
    into ``agentd.toml`` when it is unset)."""
    redis_password: str | None = Field(default=None, min_length=16, max_length=512, repr=False)
    """The embedded Valkey's password, asked of every client once it listens on TCP."""
    worker_dir: Path = Field(default_factory=default_worker_dir)
    """A reflection worker's own directory (its scratch and its logs): never the home,
    which a worker does not open."""
    reflection_job_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024, le=1 << 34)
    """The largest memory bundle a reflection job may carry to a worker, and the largest
    bundle of commits a worker may send back."""
    reflection_trigger: ReflectionTrigger = DEFAULT_TRIGGER
    """Default reflection trigger for agents that set none (``agentctl reflection-settings``)."""
    reflection_step_count: int = Field(default=DEFAULT_STEP_COUNT, ge=1, le=100_000)
    reflection_merge: MergeMode = DEFAULT_MERGE
    reflection_model: str | None = None
    """Model of the reflection sub-agent; unset means the agent's own model."""
    reflection_context_window: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_WINDOW)
    """The sub-agent's own window: a tiny shared window makes it forget the payload."""
    reflection_lease_s: int = Field(default=60, ge=2, le=86_400)
    """How long a worker that stops renewing (killed, its host gone) keeps its agent's
    reflection lease: the longest a lost job waits before the daemon sends it again. Its
    holder renews it every quarter of that. It also bounds two other waits of the same
    question, "is that job's worker alive?": the time a job taken off the queue may take to
    show its lease, and how long a finished job keeps trying to store its answer through a
    Redis restart (past it, the daemon owns the job again)."""
    reflection_time_limit_s: int = Field(default=20 * 60, ge=120, le=7 * 86_400)
    """The longest one job may run on a worker (Celery's hard time limit; a minute before
    it the job stops with ``failed: time_limit``): a hung sub-agent, which would hold its
    agent's lease forever while the lease thread renews it, is killed, so the lease alone
    decides when a job is lost."""
    redis_timeout_s: float = Field(default=5.0, gt=0, le=600)
    """How long any Redis call of agentd (daemon, workers, doctor, status) may go
    unanswered before it fails. Above Valkey's own stall under a busy disk (up to 2 s with
    ``appendfsync everysec``: at 0.5 s a loaded machine's Redis was called unreachable); a
    Redis that is down refuses at once, so only a hung or distant one costs the wait.
    Sending a job's memory bundle must fit in it too: raise it for big memories over a slow
    link."""
    reflection_reconcile_s: float = Field(default=5.0, gt=0, le=3_600)
    """How often the daemon asks Redis about each sent job (and how long one read of the
    answer stream blocks): the most a missed answer, a lost job or a request that waited for
    Redis waits before the daemon acts."""
    worker_heartbeat_s: float = Field(default=2.0, gt=0, le=3_600)
    """How often a worker refreshes its entry in Redis; the entry lives four beats, so a
    worker killed with -9 leaves ``agentctl status`` within that, and a live one survives
    three missed beats."""
    reflection_max_tries: int = Field(default=3, ge=1, le=100)
    """Starts of one reflection job before it is recorded ``failed: redelivered``: a job
    that keeps killing its worker must not be redelivered forever."""
    reflection_hold_share: float = Field(default=0.3, gt=0, le=1)
    """A reflection that removes more than this share of memory's lines (net of what it
    adds) is held for the user (``agentctl memory proposals``) instead of merged."""
    memory_file_max_bytes: int = Field(default=DEFAULT_FILE_MAX_BYTES, ge=1, le=1 << 40)
    """Largest one memory file may be; over it a write or a reflection is refused."""
    memory_max_bytes: int = Field(default=DEFAULT_MEMORY_MAX_BYTES, ge=1, le=1 << 40)
    """Largest a whole memory repo's files may be together."""
    mock_latency_s: float = Field(default=0.0, ge=0, le=3_600)
    """Simulated model latency of the mock models (demos and tests of slow providers)."""
    reflection_wait_s: float = Field(default=15.0, ge=0, le=3_600)
    """How long a chat turn that triggered a reflection waits to report its outcome."""
    reflection_idle_s: int = Field(default=86_400, ge=1, le=366 * 86_400)
    """A conversation quiet this long with unreflected steps gets an ``idle`` reflection."""
    workers: int = Field(default=2, ge=0, le=64)
    """Reflection worker processes ``agentd up`` starts; the jobs ``agentd worker`` runs at
    once (its default ``--concurrency``)."""
    block_remote_models: bool = False
    """Refuse model requests to anything but a loopback address (the test suite sets it,
    so no test can reach a real provider)."""
    timezone: str | None = None
    """The user's timezone (IANA name) for "today"/"yesterday"; unset means the system's."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "console"] = "auto"
    max_steps: int = Field(default=DEFAULT_MAX_STEPS, ge=1, le=1000)
    max_message_chars: int = Field(default=DEFAULT_MAX_MESSAGE_CHARS, ge=1, le=MAX_REQUEST_BYTES)
    bash_timeout_s: float = Field(default=DEFAULT_BASH_TIMEOUT_S, gt=0, le=86_400)
    bash_output_chars: int = Field(default=DEFAULT_BASH_OUTPUT_CHARS, ge=100, le=10_000_000)
    tool_network: bool = False
    """Whether the agent's sandboxed bash may use the host's network (off: no network)."""
    unsandboxed_bash: bool = False
    """Offer bash where bubblewrap does not work, running bare with only a scrubbed
    environment: it can then read and write whatever this user can. Off: no bash there."""
    provider_timeout_s: float = Field(default=DEFAULT_PROVIDER_TIMEOUT_S, gt=0, le=3_600)
    provider_attempts: int = Field(default=DEFAULT_PROVIDER_ATTEMPTS, ge=1, le=10)
    shutdown_grace_s: float = Field(default=DEFAULT_SHUTDOWN_GRACE_S, ge=0, le=3_600)
    max_connections: int = Field(default=1_000, ge=1, le=1_000_000)
    """Client connections served at once; more are told ``busy`` and closed. Capped
    further at half the daemon's open-file limit, which turns need too."""
    write_timeout_s: float = Field(default=30.0, gt=0, le=3_600)
    """A client that takes no output for this long is dropped; its turn runs on to the log."""
    idle_timeout_s: float = Field(default=300.0, gt=0, le=86_400)
    """A connection with nothing in flight and no request for this long is closed."""
    web: str | None = Field(default=None, pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$")
    """Serve the web view at ``host:port`` (``AGENTD_WEB=127.0.0.1:8765``; ``agentd up
    --web`` sets that); unset: no web view. Any address but loopback is warned about."""
    web_max_connections: int = Field(default=64, ge=1, le=100_000)
    """Web view connections served at once; more get ``503`` and are closed. Capped further
    at an eighth of the daemon's open-file limit, so the socket and turns keep theirs."""
    web_header_timeout_s: float = Field(default=15.0, gt=0, le=3_600)
    """A web connection has this long to send a whole request head (a slow one holds a
    connection); an idle keep-alive connection is closed after it too."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Layout(agentd_home()).config_file
        return (
            init_settings,
            env_settings,
            StrictTomlSource(settings_cls, toml_file),
        )

    @property
    def memory_limits(self) -> MemoryLimits:
        """The size limits every writer of memory applies (:mod:`shared.memory.content`)."""
        return MemoryLimits(
            file_bytes=self.memory_file_max_bytes, total_bytes=self.memory_max_bytes
        )

    @property
    def layout(self) -> Layout:
        """Where everything lives under ``home`` (:class:`shared.store.layout.Layout`)."""
        return Layout(self.home)


def load_settings(**given: tuple[str, Any]) -> Settings:
    """The settings of an entry point, or :class:`~shared.errors.InvalidSettings` saying
    what to fix in one line per problem. ``given`` holds the values a command line passed,
    each with the flag that passed it: ``web=("--web", "127.0.0.1:80")``."""
    try:
        return Settings(**{name: value for name, (_, value) in given.items()})
    except ValidationError as exc:
        flags = {name: f"{flag} {value!r}" for name, (flag, value) in given.items()}
        raise InvalidSettings(
            describe(exc, toml_file=Layout(agentd_home()).config_file, given=flags)
        ) from None
