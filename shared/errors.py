"""The one error tree of agentd.

Every error that may cross the socket derives from :class:`AgentdError` and carries a
stable ``code`` (what scripts match on) and a message that says what to do::

    AgentdError
    ├── RequestError                 the caller sent something we refuse; nothing changed
    │   ├── MalformedRequest         not JSON, not an object, missing or mistyped fields
    │   ├── UnknownOp
    │   ├── InvalidId                an id that is not [A-Za-z0-9_-]{1,64} (path tricks included)
    │   ├── PayloadTooLarge          a request line or a message over its limit
    │   ├── UnknownAgent
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
    │   └── ApprovalPending          a message sent while a call of the conversation waits
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
    ├── ShuttingDown                 the daemon is stopping and takes no new turns
    ├── Busy                         every connection the daemon allows is open; retry
    ├── RecallUnavailable            recall's process stopped mid-request; it restarts: retry
    ├── InvalidSettings              agentd.toml or an AGENTD_* variable refused at start
    └── ReflectionError
        └── TooManyCommits           a branch with more commits than one reflection may land

Tool failures are not daemon errors: a tool raises :class:`ToolError`, which the agent
loop hands back to the model as the tool's result (the turn goes on).
"""

from __future__ import annotations


class AgentdError(Exception):
    """Base of every error agentd reports to a caller. Catch this at process boundaries."""

    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class RequestError(AgentdError):
    code = "bad_request"


class MalformedRequest(RequestError):
    code = "malformed_request"


class UnknownOp(RequestError):
    code = "unknown_op"


class InvalidId(RequestError):
    code = "invalid_id"


class PayloadTooLarge(RequestError):
    code = "payload_too_large"


class UnknownAgent(RequestError):
    code = "unknown_agent"


class UnknownConversation(RequestError):
    code = "unknown_conversation"


class UnknownMessage(RequestError):
    code = "unknown_message"


class AmbiguousMessage(RequestError):
    """A short message id (its last characters) that more than one message ends with."""

    code = "ambiguous_message"


class NameTaken(RequestError):
    code = "name_taken"


class AgentExists(RequestError):
    code = "agent_exists"


class InUse(RequestError):
    """A delete refused while a turn or a reflection works on what it would move away."""

    code = "in_use"


class InvalidArchive(RequestError):
    """An import refused before it touched the home: a bad member, size or bundle."""

    code = "invalid_archive"


class MemoryConflict(RequestError):
    """A hand edit refused because its file changed since the editor opened it."""

    code = "memory_conflict"


class RevertConflict(MemoryConflict):
    """A revert refused because later commits changed the lines it would undo; memory is
    left exactly as it was."""

    code = "revert_conflict"


class ProposalConflict(MemoryConflict):
    """A held proposal that cannot be accepted because memory changed since in the same
    lines; memory is left exactly as it was and the proposal stays held."""

    code = "proposal_conflict"


class MemoryPathError(RequestError):
    code = "memory_path"


class MemoryContentError(RequestError):
    """Memory content agentd never keeps; nothing of it was committed or merged.

    ``path`` is the offending file (``""`` for the whole memory), ``rule`` names what it
    broke (:data:`shared.memory.content.Rule`)."""

    code = "memory_content"

    def __init__(self, message: str, *, path: str, rule: str) -> None:
        super().__init__(message)
        self.path = path
        self.rule = rule


class NestedRepository(MemoryContentError):
    """A ``.git`` directory or file (or a gitlink) below memory's root: git would descend
    into it and obey its config, so it is never memory content."""

    code = "nested_repository"


class MemoryTooLarge(MemoryContentError):
    """A memory file, or memory as a whole, over its configured size limit."""

    code = "memory_too_large"


class UnknownRevision(RequestError):
    """A revision (sha, ``HEAD~2``) that is not a commit of the agent's memory repo."""

    code = "unknown_revision"


class NothingToForget(RequestError):
    """A forget whose pattern matches no line of memory's files (frontmatter aside)."""

    code = "nothing_to_forget"


class UnknownProposal(RequestError):
    """No reflection proposal of the agent has that id (``agentctl memory proposals``)."""

    code = "unknown_proposal"


class ProposalAnswered(RequestError):
    """A proposal is answered once: a second accept or reject of it changes nothing."""

    code = "proposal_answered"


class UnknownTool(RequestError):
    """A tool name that is none of the agent's tools (``agents update --approve``)."""

    code = "unknown_tool"


class UnknownApproval(RequestError):
    """No call waits with that approval id: never asked, or from a step long finished."""

    code = "unknown_approval"


class AlreadyAnswered(RequestError):
    """A waiting call is answered once: a second approve or deny of it changes nothing."""

    code = "already_answered"


class ApprovalPending(RequestError):
    """A new message is refused while a call of its conversation waits for the user's
    answer: the turn is not over, and the model would read the message as the answer."""

    code = "approval_pending"


class StoreError(AgentdError):
    code = "store_error"


class CorruptStateFile(StoreError):
    code = "corrupt_state_file"

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(
            f"state file {path} is corrupt ({reason}); move it aside and restart agentd, "
            "or restore it from a backup"
        )
        self.path = str(path)


class StateFileTooNew(CorruptStateFile):
    """A state file of a schema version this agentd does not know yet.

    A kind of corrupt file to every reader that sets damaged files aside, but it is never
    read as this version's shape: writing it back would lose what the newer one added.
    """

    code = "state_file_too_new"

    def __init__(self, path: object, kind: str, found: int, current: int) -> None:
        StoreError.__init__(
            self,
            f"state file {path} was written by a newer agentd ({kind} schema {found}; this "
            f"agentd reads up to {current}); upgrade agentd, or restore the file from a "
            "backup this version wrote",
        )
        self.path = str(path)
        self.found = found
        self.current = current


class AgentRecordMissing(StoreError):
    """An agent directory holds data (memory, conversations) but no ``agent.json``."""

    code = "agent_record_missing"

    def __init__(self, directory: object, message: str) -> None:
        super().__init__(message)
        self.path = str(directory)


class DiskFull(StoreError):
    """A write was refused for want of space (ENOSPC, EDQUOT) and undone."""

    code = "disk_full"

    def __init__(self, path: object, *, needed: int, free: int) -> None:
        super().__init__(
            f"the disk is full: writing {path} needs {needed:,} bytes and {free:,} are free. "
            "Free some space on that disk (more than this write: the turn writes more) "
            "and try again; everything saved before this write is kept"
        )
        self.path = str(path)
        self.needed = needed
        self.free = free


class LockTimeout(StoreError):
    code = "lock_timeout"


class MemoryRepoError(StoreError):
    """A git operation on a memory repo failed, or the repo is in a state we refuse."""

    code = "memory_repo"


class MemoryDamaged(MemoryRepoError):
    """An agent's memory checkout is not a usable git repo (its ``.git`` is gone, say)."""

    code = "memory_damaged"

    def __init__(self, path: object, reason: str, fix: str) -> None:
        super().__init__(f"the memory repo {path} is damaged ({reason}). {fix}")
        self.path = str(path)
        self.reason = reason
        self.fix = fix


class MemoryBusy(MemoryRepoError):
    """A running git holds a lock file the operation needs: retry once it has finished.

    A lock left behind by a git that died is removed instead (:mod:`shared.memory.git_locks`),
    so this one is always worth a retry."""

    code = "memory_busy"


class ProviderError(AgentdError):
    code = "provider_error"


class ContextOverflowError(ProviderError):
    code = "context_overflow"


class ProviderAuthError(ProviderError):
    code = "provider_auth"


class ProviderConfigError(ProviderError):
    code = "provider_config"


class ProviderUnreachable(ProviderError):
    """No connection to the provider at all: nothing listens there, or the host does not
    resolve. Retried once (a server restarting), then reported with the URL to check."""

    code = "provider_unreachable"

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class ProviderHTTPError(ProviderError):
    code = "provider_http"

    def __init__(self, message: str, *, status_code: int | None, model: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.model = model


class ProviderTimeout(ProviderHTTPError):
    """The provider sent nothing for ``AGENTD_PROVIDER_TIMEOUT_S``: no answer, no first
    token, or no next piece of a stream. Not retried: a hung provider is reported when the
    timeout says so, not after as long again for each attempt."""

    code = "provider_timeout"

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message, status_code=None, model=model)


class ProviderMisbehaved(ProviderError):
    code = "provider_misbehaved"


class ShuttingDown(AgentdError):
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__("agentd is shutting down; start it again with `agentd up`")


class Busy(AgentdError):
    """Sent, unasked, on a connection over ``AGENTD_MAX_CONNECTIONS`` before it is closed."""

    code = "busy"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"agentd is serving its limit of {limit:,} connections; try again in a moment, "
            "or raise AGENTD_MAX_CONNECTIONS (and the open-file limit) if that many clients "
            "are expected"
        )


class RecallUnavailable(AgentdError):
    """Recall runs in a process of its own (:mod:`agentd.recall_client`); a request it
    held when that process died is answered with this, and the process is started again."""

    code = "recall_unavailable"

    def __init__(self, why: str) -> None:
        super().__init__(
            f"recall could not answer ({why}); it is restarting: try again in a moment"
        )


class InvalidSettings(AgentdError):
    """A setting a process refuses at start (:mod:`shared.settings`): the message
    names the variable or the file and key, and the process exits 2."""

    code = "invalid_settings"


class ReflectionError(AgentdError):
    code = "reflection_error"


class TooManyCommits(ReflectionError):
    """A reflection's branch holds more new commits than one job may land; each is rebuilt
    under the harness's identity (:mod:`shared.memory.signing`), so there is a bound."""

    code = "too_many_commits"


class BundleError(ReflectionError):
    """A git bundle that is not one: damaged, cut short, or not what it says it holds (a
    job's memory, a worker's commits)."""

    code = "bundle_corrupt"


class JobTooLarge(ReflectionError):
    """A job's memory or a worker's answer over ``AGENTD_REFLECTION_JOB_MAX_BYTES``."""

    code = "job_too_large"


class InvalidAnswer(ReflectionError):
    """A worker's answer that does not hold together: commits it claims and does not
    carry, carries and does not claim, that do not build on the memory it was sent, or
    objects and refs nobody asked for. Nothing of it is merged."""

    code = "invalid_answer"


class WorkerOutdated(ReflectionError):
    """A job in a format the worker does not know: the worker runs an older agentd."""

    code = "worker_outdated"


class ToolError(Exception):
    """Raised by a tool to tell the model what went wrong; never reaches the socket."""
