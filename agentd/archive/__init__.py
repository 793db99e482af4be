"""Export of an agent to a ``.tar.gz`` and import of one: the socket ops, what an
archive holds, reading an upload member by member, and building the agent from it.
"""
