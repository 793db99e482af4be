"""The web view and the OpenAI-compatible endpoint: an aiohttp app on the daemon's
event loop, its pages, templates and static files, sessions and guards.
"""
