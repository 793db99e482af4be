"""Errors of a request the caller got wrong: nothing changed, and the message says what to
send instead.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


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


class UnknownApiKey(RequestError):
    """``agentctl api-keys revoke`` of a key id no key has."""

    code = "unknown_api_key"


class BadCompletionRequest(MalformedRequest):
    """A chat-completions request the endpoint cannot take (HTTP 400), naming the field."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ModelNotFound(UnknownAgent):
    """The OpenAI-compatible endpoint's ``model`` names no agent."""

    code = "model_not_found"
    param = "model"
