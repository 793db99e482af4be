"""Coordination over Redis: key names, the reflection lease, outcome events, the broker.

Redis coordinates; it never holds the truth. Everything here can be lost with Redis
without losing data or a due reflection: requests are on disk (the daemon's outbox),
outcomes in ``reflections/log.jsonl``, backoff in ``reflections/backoff.json``.
"""
