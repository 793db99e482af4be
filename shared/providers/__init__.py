"""LLM providers behind one method, ``Provider.complete``.

``litellm`` talks to real providers; ``mock`` is deterministic and offline; ``scripted``
replays queued replies for tests. Only :func:`shared.providers.factory.make_provider`
decides which one a model string gets, and only it imports litellm (lazily).
"""
