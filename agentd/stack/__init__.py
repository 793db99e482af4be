"""The stack around the daemon: ``agentd up``'s supervisor, the one-per-home instance
locks, ``agentd worker``, and ``agentd doctor`` with its checks and findings.
"""
