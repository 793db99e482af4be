"""Tools the main agent may call. Each tool is a small class with a schema and ``run``."""
