"""Background reflection workers: a job's inputs come from Redis, its sub-agent works in a
clone of the memory bundle the job carries, and its answer goes back through Redis.

A worker needs nothing but Redis and its own model settings: it never opens the daemon's
home, and the daemon alone merges what it answers (``agentd/jobs/``). A job may run twice
(a broker redelivers it after a worker crash): the first answer for its inputs is kept.
"""
