"""Fault injection: the chaos bench (``chaos.py``) and what it builds on."""
