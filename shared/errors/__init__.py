"""The one error tree of agentd, drawn here; each branch lives in a module of its own
(:mod:`.requests`, :mod:`.store`, :mod:`.providers`, :mod:`.service`, :mod:`.reflection`,
:mod:`.setup`, :mod:`.content`, :mod:`.clients`, :mod:`.tools`; the root in :mod:`.root`)
and is imported from here: ``from shared.errors import X``.

Every error that may cross the socket derives from :class:`AgentdError` and carries a
stable ``code`` (what scripts match on) and a message that says what to do::

    AgentdError
    ├── RequestError                 the caller sent something we refuse; nothing changed
    │   ├── MalformedRequest         not JSON, not an object, missing or mistyped fields
    │   │   └── BadCompletionRequest an OpenAI-style request the endpoint cannot take (HTTP 400)
    │   ├── UnknownOp
    │   ├── InvalidId                an id that is not [A-Za-z0-9_-]{1,64} (path tricks included)
    │   ├── PayloadTooLarge          a request line or a message over its limit
    │   ├── UnknownAgent
    │   │   └── ModelNotFound        the endpoint's ``model`` names no agent
    │   ├── UnknownConversation
    │   ├── UnknownMessage
    │   ├── AmbiguousMessage         a short message id that names more than one message
    │   ├── NameTaken
    │   ├── AgentExists              an import with --keep-id whose agent id is taken
    │   ├── InUse                    a turn or reflection runs on what is to be deleted
    │   ├── InvalidArchive           an import archive that is not one agentd wrote
    │   ├── MemoryConflict           a hand edit whose file changed while it was edited
    │   │   ├── RevertConflict       a memory revert whose lines later commits changed
    │   │   └── ProposalConflict     a held proposal whose lines later commits changed
    │   ├── MemoryPathError          a memory file path outside the repo or not present
    │   ├── MemoryContentError       memory content we never keep (shared.memory.content)
    │   │   ├── NestedRepository     a ``.git`` (or a gitlink) below memory's root
    │   │   └── MemoryTooLarge       a file or the whole memory over its size limit
    │   ├── UnknownRevision          a memory revision that names no commit of the repo
    │   ├── NothingToForget          a forget whose pattern matches no memory line
    │   ├── UnknownProposal          no held reflection proposal has that id
    │   ├── ProposalAnswered         the proposal was accepted or rejected already
    │   ├── UnknownTool              a tool name no agent has (``--approve``)
    │   ├── UnknownApproval          no tool call waits with that approval id
    │   ├── AlreadyAnswered          the call was approved or denied already
    │   ├── ApprovalPending          a message sent while a call of the conversation waits
    │   └── UnknownApiKey            no API key has that id
    ├── StoreError                   the data directory is not as we left it
    │   ├── CorruptStateFile
    │   │   └── StateFileTooNew      written by a newer agentd (a later schema_version)
    │   ├── AgentRecordMissing       an agent directory holds data but its agent.json is gone
    │   ├── DiskFull                 a write failed for want of space; what it needed is said
    │   ├── LockTimeout              another process held a file lock too long
    │   └── MemoryRepoError          a git operation on a memory repo failed
    │       ├── MemoryDamaged        the checkout is not a usable git repo: that agent is refused
    │       └── MemoryBusy           a live git holds one of the repo's lock files; retry
    ├── ProviderError                the model call failed
    │   ├── ContextOverflowError     the request is larger than the model's window
    │   ├── ProviderAuthError        missing or rejected credentials
    │   ├── ProviderConfigError      unknown model, bad api base, missing dependency
    │   ├── ProviderUnreachable      nothing answers at the api base (refused, no such host)
    │   ├── ProviderHTTPError        any other HTTP failure, after our retries
    │   │   └── ProviderTimeout      nothing from the provider for the configured timeout
    │   └── ProviderMisbehaved       a response we cannot use (no choices, bad shape)
    ├── PromptFloorError             the system prompt and tools alone fill the window
    ├── ShuttingDown                 the daemon is stopping and takes no new turns
    ├── Busy                         every connection the daemon allows is open; retry
    ├── RecallUnavailable            recall's process stopped mid-request; it restarts: retry
    ├── InternalError                a bug of agentd (an op crashed): the agentd log says what
    │   └── InvalidReply             an op's handler answered in a shape not its reply model's
    ├── ReflectionError
    │   ├── TooManyCommits           a branch with more commits than one reflection may land
    │   ├── BundleError              a git bundle that is damaged or not what it says it holds
    │   ├── JobTooLarge              a job's memory or an answer over its size limit
    │   ├── InvalidAnswer            a worker's answer that does not hold together
    │   └── WorkerOutdated           a job in a format the worker does not know
    ├── InvalidSettings              agentd.toml or an AGENTD_* variable refused at start
    ├── RedisUnavailable             Redis cannot be started or reached
    ├── AlreadyRunning               a daemon already answers on this AGENTD_HOME's socket
    ├── SocketPathTooLong            the socket's path is over a Unix socket address's limit
    ├── WebViewOff                   ``agentctl web`` on a daemon that serves no web view
    ├── WebAddressError              AGENTD_WEB is not host:port
    ├── ApiKeyRefused                the endpoint's key is missing, wrong or revoked (HTTP 401)
    ├── FrontmatterError             a memory file's frontmatter that cannot be read
    ├── DaemonUnanswered             ``agentd doctor`` got no usable answer from the daemon
    │   ├── NotRunning               nothing accepts connections on the socket
    │   └── NoAnswer                 it took the connection and answered nothing usable
    ├── ClientError                  what agentctl prints as ``code: message`` (exit 1)
    │   └── DaemonError              the same, met by a tool or resource of ``agentctl mcp``
    └── ToolError                    a tool's failure, handed back to the model as its result

Tool failures never reach the socket: a tool raises :class:`ToolError`, which the agent
loop hands back to the model as the tool's result (the turn goes on).

The tree is closed: every exception class of ``agentd``, ``reflector`` and ``shared`` is
defined here and drawn above, under its parent (``tests/test_error_tree.py`` checks both).
"""

from __future__ import annotations

from shared.errors.clients import (
    ClientError,
    DaemonError,
    DaemonUnanswered,
    NoAnswer,
    NotRunning,
)
from shared.errors.content import (
    FrontmatterError,
    PromptFloorError,
)
from shared.errors.providers import (
    ContextOverflowError,
    ProviderAuthError,
    ProviderConfigError,
    ProviderError,
    ProviderHTTPError,
    ProviderMisbehaved,
    ProviderTimeout,
    ProviderUnreachable,
)
from shared.errors.reflection import (
    BundleError,
    InvalidAnswer,
    JobTooLarge,
    ReflectionError,
    TooManyCommits,
    WorkerOutdated,
)
from shared.errors.requests import (
    AgentExists,
    AlreadyAnswered,
    AmbiguousMessage,
    ApprovalPending,
    BadCompletionRequest,
    InUse,
    InvalidArchive,
    InvalidId,
    MalformedRequest,
    MemoryConflict,
    MemoryContentError,
    MemoryPathError,
    MemoryTooLarge,
    ModelNotFound,
    NameTaken,
    NestedRepository,
    NothingToForget,
    PayloadTooLarge,
    ProposalAnswered,
    ProposalConflict,
    RequestError,
    RevertConflict,
    UnknownAgent,
    UnknownApiKey,
    UnknownApproval,
    UnknownConversation,
    UnknownMessage,
    UnknownOp,
    UnknownProposal,
    UnknownRevision,
    UnknownTool,
)
from shared.errors.root import (
    AgentdError,
)
from shared.errors.service import (
    Busy,
    InternalError,
    InvalidReply,
    InvalidSettings,
    RecallUnavailable,
    ShuttingDown,
)
from shared.errors.setup import (
    AlreadyRunning,
    ApiKeyRefused,
    RedisUnavailable,
    SocketPathTooLong,
    WebAddressError,
    WebViewOff,
)
from shared.errors.store import (
    AgentRecordMissing,
    CorruptStateFile,
    DiskFull,
    LockTimeout,
    MemoryBusy,
    MemoryDamaged,
    MemoryRepoError,
    StateFileTooNew,
    StoreError,
)
from shared.errors.tools import (
    ToolError,
)

__all__ = [
    "AgentExists",
    "AgentRecordMissing",
    "AgentdError",
    "AlreadyAnswered",
    "AlreadyRunning",
    "AmbiguousMessage",
    "ApiKeyRefused",
    "ApprovalPending",
    "BadCompletionRequest",
    "BundleError",
    "Busy",
    "ClientError",
    "ContextOverflowError",
    "CorruptStateFile",
    "DaemonError",
    "DaemonUnanswered",
    "DiskFull",
    "FrontmatterError",
    "InUse",
    "InternalError",
    "InvalidAnswer",
    "InvalidArchive",
    "InvalidId",
    "InvalidReply",
    "InvalidSettings",
    "JobTooLarge",
    "LockTimeout",
    "MalformedRequest",
    "MemoryBusy",
    "MemoryConflict",
    "MemoryContentError",
    "MemoryDamaged",
    "MemoryPathError",
    "MemoryRepoError",
    "MemoryTooLarge",
    "ModelNotFound",
    "NameTaken",
    "NestedRepository",
    "NoAnswer",
    "NotRunning",
    "NothingToForget",
    "PayloadTooLarge",
    "PromptFloorError",
    "ProposalAnswered",
    "ProposalConflict",
    "ProviderAuthError",
    "ProviderConfigError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderMisbehaved",
    "ProviderTimeout",
    "ProviderUnreachable",
    "RecallUnavailable",
    "RedisUnavailable",
    "ReflectionError",
    "RequestError",
    "RevertConflict",
    "ShuttingDown",
    "SocketPathTooLong",
    "StateFileTooNew",
    "StoreError",
    "TooManyCommits",
    "ToolError",
    "UnknownAgent",
    "UnknownApiKey",
    "UnknownApproval",
    "UnknownConversation",
    "UnknownMessage",
    "UnknownOp",
    "UnknownProposal",
    "UnknownRevision",
    "UnknownTool",
    "WebAddressError",
    "WebViewOff",
    "WorkerOutdated",
]
