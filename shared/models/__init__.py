"""Pydantic models at the boundaries: what goes to disk, over the socket and to providers."""
