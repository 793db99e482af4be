"""Errors of the data directory: a file, lock or memory repo not as agentd left it.

Part of the tree drawn in :mod:`shared.errors`.
"""

from __future__ import annotations

from shared.errors.root import AgentdError


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
