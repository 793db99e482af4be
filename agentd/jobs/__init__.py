"""Reflection jobs coming home: a worker's result received, checked against the gates,
held or integrated, and landed in memory by the daemon, the one writer of memory.
"""
