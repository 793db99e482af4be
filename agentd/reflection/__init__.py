"""The daemon's side of reflection: deciding after each turn, the durable outbox of
requests, hearing workers' answers, and the idle sweep of quiet conversations. What
lands a job's result in memory is :mod:`agentd.jobs`.
"""
