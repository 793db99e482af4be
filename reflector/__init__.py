"""Background reflection workers: they edit an agent's memory in a git worktree and merge back.

A job may run twice (a broker redelivers it after a worker crash), so every step must be safe
to repeat: recreating a job's worktree discards the earlier attempt, and finalizing never
merges the same branch twice.
"""
