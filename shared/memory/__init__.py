"""An agent's memory: a git repo of Markdown files with frontmatter.

Git rather than a table, so that every edit (by the agent, the reflector or the user) is a
commit that can be listed, diffed and reverted, and so that a turn can tell from one sha
whether memory moved under it. ``repo`` wraps the repo, ``frontmatter`` reads the files,
``compile`` turns committed memory into the system prompt, ``changes`` tells a conversation
that memory changed since its last turn.
"""
