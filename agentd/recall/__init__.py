"""The daemon's recall: the service that keeps one index per agent, the process it runs
in, the client the daemon talks to it through and the frames they exchange, the
catch-up that reads what an index missed from the logs, and an agent's view of it.
"""
