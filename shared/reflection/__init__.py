"""Reflection bookkeeping shared by the daemon and the reflector workers.

The daemon decides after each turn whether a reflection is due (:mod:`.triggers`); a
worker cuts the unreflected slice of a conversation into a payload (:mod:`.payload`) and,
only when the outcome consumed it, advances the watermark (:mod:`.state`). Both sides
resolve the same per-agent settings (:mod:`.settings`). Everything here works on files
under a conversation directory, so neither side needs Redis to know where it stands.
"""
